//! Which replicas hold which attribute and column layers.
//!
//! An attribute layer (`puffer_store::attr_layer`) turns each row an attribute predicate
//! finds from a Psi walk (a few microseconds) into a read of a packed array; a column
//! layer (`puffer_store::column_layer`) turns each value a scan reads from a field
//! extracted out of the compressed text (tens of microseconds a record) into one too.
//! What either saves is proportional to the rows it serves per second; what it costs
//! is its bytes. So the policy ranks (replica, attribute, kind) triples by rows per
//! second per byte, both kinds together, and buys from the memory budget the sample
//! layers leave free (a column layer saves more per row than an attribute layer, so
//! ranking both by rows undervalues column layers a little: they are bought later than
//! their savings alone would say, never wrongly):
//!
//! 1. a held layer whose attribute has gone cold (below `sell_fraction` of the buying
//!    rate) and has been held `hold_seconds` is sold;
//! 2. while the node is over its budget, held layers are sold, least rows per byte
//!    first (attribute layers give memory back before sample layers do: a sample layer
//!    serves every query of its replica, an attribute layer one attribute's);
//! 3. pairs at or above `buy_rows_per_second` are bought, most rows per byte first, while
//!    memory lasts; one that does not fit may displace held layers of less than half its
//!    rows per byte that have been held `hold_seconds` (so layers follow a shifting mix
//!    even when memory is short, without flapping).
//!
//! Rates are taken over a sliding window ([`WindowedRate`]) so that one long answer
//! does not buy a layer on its own, and an attribute no longer queried reads cold one
//! window later.

use serde::{Deserialize, Serialize};

use crate::{config_error, ConfigError, ReplicaId};

/// The attribute-layer policy's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttributeConfig {
    /// Whether attribute layers are bought at all (off: none is; held ones are sold).
    pub enabled: bool,
    /// Rows per second found through an attribute at which its layer is bought.
    pub buy_rows_per_second: f64,
    /// A held layer is cold below this fraction of `buy_rows_per_second`.
    pub sell_fraction: f64,
    /// Least time between two changes of one replica's layer of one attribute.
    pub hold_seconds: f64,
    /// Window of the rates, in seconds.
    pub window_seconds: f64,
    /// Window of the rates of column layers, in seconds: longer, because scans come
    /// less often than predicates but each reads a whole table (one scan of 100,000
    /// records a minute is 1,700 rows a second, but a 5-second window sees it as a burst
    /// and then nothing, and sells the layer between two scans).
    #[serde(default = "default_column_window_seconds")]
    pub column_window_seconds: f64,
}

fn default_column_window_seconds() -> f64 {
    60.0
}

impl AttributeConfig {
    /// The window of the rates of `kind`'s layers, in seconds.
    pub fn window_seconds_of(&self, kind: LayerKind) -> f64 {
        match kind {
            LayerKind::Attribute => self.window_seconds,
            LayerKind::Column => self.column_window_seconds,
        }
    }
}

impl Default for AttributeConfig {
    fn default() -> Self {
        AttributeConfig {
            enabled: true,
            // 500 rows a second walked at ~3 us a row is 1.5 ms of a core every second,
            // for a layer of about 2 bytes a record: cheap to hold for any attribute
            // queried that often.
            buy_rows_per_second: 500.0,
            sell_fraction: 0.2,
            hold_seconds: 10.0,
            window_seconds: 5.0,
            column_window_seconds: default_column_window_seconds(),
        }
    }
}

impl AttributeConfig {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.buy_rows_per_second.is_finite() && self.buy_rows_per_second > 0.0) {
            return Err(config_error(
                "buy_rows_per_second",
                format!("{} is not a positive rate", self.buy_rows_per_second),
            ));
        }
        if !(self.sell_fraction >= 0.0 && self.sell_fraction < 1.0) {
            return Err(config_error(
                "sell_fraction",
                format!("{} is not in [0, 1)", self.sell_fraction),
            ));
        }
        if !(self.hold_seconds.is_finite() && self.hold_seconds >= 0.0) {
            return Err(config_error(
                "hold_seconds",
                format!("{} is not a duration", self.hold_seconds),
            ));
        }
        for (name, seconds) in [
            ("window_seconds", self.window_seconds),
            ("column_window_seconds", self.column_window_seconds),
        ] {
            if !(seconds.is_finite() && seconds > 0.0) {
                return Err(config_error(
                    name,
                    format!("{seconds} is not a positive duration"),
                ));
            }
        }
        Ok(())
    }
}

/// Which kind of layer of an attribute.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum LayerKind {
    /// The record of each suffix-array entry of the attribute's fields (predicates).
    #[default]
    Attribute,
    /// The attribute's value of each record (scans).
    Column,
}

impl LayerKind {
    /// Both kinds.
    pub const ALL: [LayerKind; 2] = [LayerKind::Attribute, LayerKind::Column];

    /// Lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            LayerKind::Attribute => "attribute",
            LayerKind::Column => "column",
        }
    }
}

/// One attribute of one replica, as the policy sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttributeSample {
    /// The replica.
    pub replica: ReplicaId,
    /// The attribute.
    pub attribute: u16,
    /// Which layer of it.
    #[serde(default)]
    pub kind: LayerKind,
    /// Rows found through the attribute per second (walked and from layers), averaged.
    pub rows_per_second: f64,
    /// Bytes the replica's layers of the attribute take (held) or would take (not held).
    pub bytes: u64,
    /// Whether the replica holds (or is building) the attribute's layers.
    pub held: bool,
    /// When the pair was last bought or sold (seconds on the caller's clock), if ever.
    pub changed_at_seconds: Option<f64>,
}

impl AttributeSample {
    fn rows_per_byte(&self) -> f64 {
        self.rows_per_second / self.bytes.max(1) as f64
    }

    fn held_long_enough(&self, now_seconds: f64, config: &AttributeConfig) -> bool {
        self.changed_at_seconds
            .is_none_or(|at| now_seconds - at >= config.hold_seconds)
    }
}

/// Why a layer is sold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SellReason {
    /// Its attribute has gone cold.
    Cold,
    /// The node is over its memory budget.
    OverBudget,
    /// A pair with more than twice its rows per byte needed the memory.
    Displaced,
}

/// A change to one replica's attribute layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum AttributeDecision {
    /// Build the replica's layers of the attribute.
    Buy {
        /// The replica.
        replica: ReplicaId,
        /// The attribute.
        attribute: u16,
        /// Which layers.
        kind: LayerKind,
    },
    /// Drop them.
    Sell {
        /// The replica.
        replica: ReplicaId,
        /// The attribute.
        attribute: u16,
        /// Which layers.
        kind: LayerKind,
        /// Why.
        reason: SellReason,
    },
}

/// One round of the policy (see the module doc). `free_bytes` is the budget minus what
/// the node holds now (negative when over); `samples` lists every pair worth looking at.
pub fn decide(
    now_seconds: f64,
    free_bytes: i64,
    samples: &[AttributeSample],
    config: &AttributeConfig,
) -> Vec<AttributeDecision> {
    let mut decisions = Vec::new();
    let mut free = free_bytes;
    let mut held: Vec<&AttributeSample> = samples.iter().filter(|s| s.held).collect();
    if !config.enabled {
        for sample in held {
            decisions.push(AttributeDecision::Sell {
                replica: sample.replica,
                attribute: sample.attribute,
                kind: sample.kind,
                reason: SellReason::OverBudget,
            });
        }
        return decisions;
    }
    let sell = |sample: &AttributeSample, reason, decisions: &mut Vec<_>, free: &mut i64| {
        decisions.push(AttributeDecision::Sell {
            replica: sample.replica,
            attribute: sample.attribute,
            kind: sample.kind,
            reason,
        });
        *free = free.saturating_add(sample.bytes as i64);
    };
    // 1. Cold layers.
    let cold_below = config.buy_rows_per_second * config.sell_fraction;
    held.retain(|s| {
        let cold = s.rows_per_second < cold_below && s.held_long_enough(now_seconds, config);
        if cold {
            sell(s, SellReason::Cold, &mut decisions, &mut free);
        }
        !cold
    });
    // 2. Over the budget: least rows per byte first.
    held.sort_by(|a, b| a.rows_per_byte().total_cmp(&b.rows_per_byte()));
    while free < 0 && !held.is_empty() {
        let sample = held.remove(0);
        sell(sample, SellReason::OverBudget, &mut decisions, &mut free);
    }
    // 3. Buy, most rows per byte first; displace what is worth less than half as much.
    let mut wanted: Vec<&AttributeSample> = samples
        .iter()
        .filter(|s| {
            !s.held
                && s.rows_per_second >= config.buy_rows_per_second
                && s.held_long_enough(now_seconds, config)
        })
        .collect();
    wanted.sort_by(|a, b| b.rows_per_byte().total_cmp(&a.rows_per_byte()));
    for sample in wanted {
        let bytes = sample.bytes as i64;
        if bytes > free {
            // `held` is ascending by rows per byte: the cheapest to lose come first.
            let mut freeable = free;
            let mut victims = 0;
            for victim in &held {
                if freeable >= bytes
                    || victim.rows_per_byte() * 2.0 >= sample.rows_per_byte()
                    || !victim.held_long_enough(now_seconds, config)
                {
                    break;
                }
                freeable = freeable.saturating_add(victim.bytes as i64);
                victims += 1;
            }
            if freeable < bytes {
                continue;
            }
            for victim in held.drain(..victims) {
                sell(victim, SellReason::Displaced, &mut decisions, &mut free);
            }
        }
        decisions.push(AttributeDecision::Buy {
            replica: sample.replica,
            attribute: sample.attribute,
            kind: sample.kind,
        });
        free -= bytes;
    }
    decisions
}

/// Rows per second over the last `window_seconds`, from a cumulative count sampled now
/// and then. A sliding window rather than an exponential average: an attribute queried
/// at a million rows a second and then not at all reads zero one window later (an
/// exponential average would take many time constants to fall below the selling rate).
#[derive(Debug, Clone, PartialEq)]
pub struct WindowedRate {
    window_seconds: f64,
    /// (time, cumulative rows), ascending; the first is at or before the window's start
    /// once the window is full. At most [`WINDOW_SAMPLES_MAX`].
    samples: std::collections::VecDeque<(f64, u64)>,
}

/// Most samples a [`WindowedRate`] keeps (older ones are thinned out beyond it).
pub const WINDOW_SAMPLES_MAX: usize = 1024;

impl WindowedRate {
    /// An empty window of `window_seconds`.
    pub fn new(window_seconds: f64) -> WindowedRate {
        WindowedRate {
            window_seconds,
            samples: std::collections::VecDeque::new(),
        }
    }

    /// Records the cumulative count `total` at `now_seconds` and returns the rate over
    /// the window (over the time seen, while less than a window has passed).
    pub fn observe(&mut self, now_seconds: f64, total: u64) -> f64 {
        self.samples.push_back((now_seconds, total));
        let start = now_seconds - self.window_seconds;
        while self.samples.len() > 2 && self.samples[1].0 <= start {
            self.samples.pop_front();
        }
        if self.samples.len() > WINDOW_SAMPLES_MAX {
            self.samples.remove(1);
        }
        let (t0, n0) = self.samples[0];
        let elapsed = now_seconds - t0;
        if elapsed <= 0.0 {
            return 0.0;
        }
        total.saturating_sub(n0) as f64 / elapsed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(replica: ReplicaId, attribute: u16, rate: f64, bytes: u64) -> AttributeSample {
        AttributeSample {
            replica,
            attribute,
            kind: LayerKind::Attribute,
            rows_per_second: rate,
            bytes,
            held: false,
            changed_at_seconds: None,
        }
    }

    fn held(mut sample: AttributeSample, at: f64) -> AttributeSample {
        sample.held = true;
        sample.changed_at_seconds = Some(at);
        sample
    }

    #[test]
    fn defaults_are_valid_and_bad_settings_are_named() {
        AttributeConfig::default().validate().unwrap();
        let bad = AttributeConfig {
            window_seconds: 0.0,
            ..AttributeConfig::default()
        };
        assert_eq!(bad.validate().unwrap_err().setting, "window_seconds");
    }

    /// With nothing held, the buys never exceed the free memory, skip pairs below the
    /// buying rate, and are the greedy choice by rows per byte (re-derived here: each pair
    /// in density order taken if it still fits).
    #[test]
    fn buys_fit_the_free_memory_and_follow_rows_per_byte() {
        let config = AttributeConfig::default();
        let samples = vec![
            pair(1, 0, 10_000.0, 100),
            pair(1, 1, 600.0, 10),
            pair(2, 0, 100.0, 1),
            pair(2, 3, 50_000.0, 1_000),
            pair(3, 4, 900.0, 400),
        ];
        for free in [0i64, 10, 100, 500, 1_000, 1_110, 1_600, 10_000] {
            let decisions = decide(0.0, free, &samples, &config);
            let bought: Vec<&AttributeSample> = decisions
                .iter()
                .map(|d| match d {
                    AttributeDecision::Buy {
                        replica, attribute, ..
                    } => samples
                        .iter()
                        .find(|s| s.replica == *replica && s.attribute == *attribute)
                        .unwrap(),
                    other => panic!("nothing held, nothing to sell: {other:?}"),
                })
                .collect();
            let spent: i64 = bought.iter().map(|s| s.bytes as i64).sum();
            assert!(spent <= free, "free {free}: spent {spent}");
            // Below the buying rate: never.
            assert!(bought.iter().all(|s| s.rows_per_second >= 500.0));
            // Greedy by density: every candidate left out did not fit when its turn came.
            let mut left = free;
            let mut expected = Vec::new();
            let mut order: Vec<&AttributeSample> = samples
                .iter()
                .filter(|s| s.rows_per_second >= 500.0)
                .collect();
            order.sort_by(|a, b| b.rows_per_byte().total_cmp(&a.rows_per_byte()));
            for s in order {
                if s.bytes as i64 <= left {
                    left -= s.bytes as i64;
                    expected.push((s.replica, s.attribute));
                }
            }
            let got: Vec<(ReplicaId, u16)> =
                bought.iter().map(|s| (s.replica, s.attribute)).collect();
            assert_eq!(got, expected, "free {free}");
        }
    }

    #[test]
    fn cold_layers_are_sold_after_the_hold_and_over_budget_ones_cheapest_first() {
        let config = AttributeConfig::default();
        let samples = vec![
            held(pair(1, 0, 10.0, 100), 0.0),
            held(pair(1, 1, 5_000.0, 100), 0.0),
            held(pair(1, 2, 800.0, 100), 0.0),
        ];
        // Within the hold, a cold layer stays.
        assert!(decide(5.0, 0, &samples, &config).is_empty());
        assert_eq!(
            decide(11.0, 0, &samples, &config),
            vec![AttributeDecision::Sell {
                replica: 1,
                attribute: 0,
                kind: LayerKind::Attribute,
                reason: SellReason::Cold
            }]
        );
        // 150 bytes over: the cold one, then the one with fewer rows per byte.
        assert_eq!(
            decide(11.0, -150, &samples, &config),
            vec![
                AttributeDecision::Sell {
                    replica: 1,
                    attribute: 0,
                    kind: LayerKind::Attribute,
                    reason: SellReason::Cold
                },
                AttributeDecision::Sell {
                    replica: 1,
                    attribute: 2,
                    kind: LayerKind::Attribute,
                    reason: SellReason::OverBudget
                },
            ]
        );
    }

    /// Both kinds of one attribute are separate choices, ranked together by rows per
    /// byte: with room for one, the denser is bought, and each decision names its kind.
    #[test]
    fn attribute_and_column_layers_of_one_attribute_are_ranked_together() {
        let config = AttributeConfig::default();
        let column = |rate, bytes| AttributeSample {
            kind: LayerKind::Column,
            ..pair(1, 4, rate, bytes)
        };
        for (column_rate, bought) in [
            (50_000.0, LayerKind::Column),
            (1_000.0, LayerKind::Attribute),
        ] {
            let samples = vec![pair(1, 4, 10_000.0, 100), column(column_rate, 100)];
            assert_eq!(
                decide(0.0, 150, &samples, &config),
                vec![AttributeDecision::Buy {
                    replica: 1,
                    attribute: 4,
                    kind: bought
                }]
            );
        }
        let samples = vec![pair(1, 4, 10_000.0, 100), column(50_000.0, 100)];
        let both = decide(0.0, 200, &samples, &config);
        assert_eq!(both.len(), 2, "{both:?}");
    }

    #[test]
    fn a_much_hotter_pair_displaces_held_ones_after_their_hold_only() {
        let config = AttributeConfig::default();
        let samples = vec![
            held(pair(1, 0, 600.0, 100), 0.0),
            held(pair(1, 1, 1_100.0, 100), 0.0),
            pair(1, 2, 20_000.0, 150),
        ];
        assert!(
            decide(5.0, 0, &samples, &config).is_empty(),
            "within the hold"
        );
        assert_eq!(
            decide(20.0, 0, &samples, &config),
            vec![
                AttributeDecision::Sell {
                    replica: 1,
                    attribute: 0,
                    kind: LayerKind::Attribute,
                    reason: SellReason::Displaced
                },
                AttributeDecision::Sell {
                    replica: 1,
                    attribute: 1,
                    kind: LayerKind::Attribute,
                    reason: SellReason::Displaced
                },
                AttributeDecision::Buy {
                    replica: 1,
                    attribute: 2,
                    kind: LayerKind::Attribute,
                },
            ]
        );
        // Not twice as dense: nothing moves.
        let close = vec![held(pair(1, 0, 600.0, 100), 0.0), pair(1, 2, 1_000.0, 100)];
        assert!(decide(20.0, 0, &close, &config).is_empty());
        // Turned off: everything held goes, nothing is bought.
        let off = AttributeConfig {
            enabled: false,
            ..config
        };
        let decisions = decide(0.0, 1 << 30, &samples, &off);
        assert_eq!(decisions.len(), 2);
        assert!(decisions
            .iter()
            .all(|d| matches!(d, AttributeDecision::Sell { .. })));
    }

    #[test]
    fn windowed_rates_count_the_last_window_only() {
        let mut window = WindowedRate::new(5.0);
        // One sample is no rate yet.
        assert_eq!(window.observe(0.0, 0), 0.0);
        let mut total = 0;
        // 1,000 rows a second for 20 s, sampled every 250 ms: 1,000 a second.
        for tick in 1..=80 {
            total += 250;
            let rate = window.observe(tick as f64 * 0.25, total);
            assert!((rate - 1_000.0).abs() < 1e-6, "{rate} at tick {tick}");
        }
        // Then nothing: the rate falls as the window slides, and is 0 one window later.
        let mut rates = Vec::new();
        for tick in 81..=104 {
            rates.push(window.observe(tick as f64 * 0.25, total));
        }
        assert!(rates.windows(2).all(|w| w[1] <= w[0]), "{rates:?}");
        assert_eq!(*rates.last().unwrap(), 0.0);
        // A burst in one sample reads as its rows over the window, not over the sample.
        let mut burst = WindowedRate::new(5.0);
        for tick in 0..=20 {
            burst.observe(tick as f64 * 0.25, 0);
        }
        let rate = burst.observe(5.25, 5_000);
        assert!((rate - 1_000.0).abs() < 1e-6, "{rate}");
        assert!(burst.samples.len() <= WINDOW_SAMPLES_MAX);
    }
}
