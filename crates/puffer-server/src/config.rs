//! Server settings: defaults, a TOML file, then environment variables (`PUFFER_*`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::ApiError;

/// Most records in a log table (`log_table_max_records`): it is held in memory and
/// scanned by every read of the log stage.
pub const MAX_LOG_TABLE_RECORDS: usize = 10_000_000;
/// Largest `record_cache_mb` (a typo of a few zeros should not take the machine's memory).
pub const MAX_RECORD_CACHE_MB: u64 = 64 << 10;

/// Largest `max_buffered_body_mb` (a typo of a few zeros should not take the machine's
/// memory).
pub const MAX_BUFFERED_BODY_MB: u64 = 64 << 10;

/// Everything the server can be told.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Data directory (tables and texts).
    pub data_dir: PathBuf,
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Largest request body, in bytes.
    pub max_body_bytes: usize,
    /// Most records in one batch (one SCU).
    pub max_batch_records: usize,
    /// Most rows one answer may hold.
    pub max_result_rows: usize,
    /// Longest text pattern, in bytes.
    pub max_pattern_bytes: usize,
    /// Largest uploaded text, in bytes.
    pub max_text_bytes: usize,
    /// Requests served at once; more are refused with 429 `overloaded`.
    pub max_concurrent_requests: usize,
    /// MiB of request bodies being received at once; a body that does not fit is
    /// refused with 429 `overloaded` (at least `max_body_bytes`).
    pub max_buffered_body_mb: u64,
    /// Connections held at once; more are answered 503 `overloaded` and closed.
    pub max_connections: usize,
    /// Seconds a request's head (request line and headers) may take to arrive.
    pub header_timeout_s: u64,
    /// Seconds a request's body may take to arrive whole, from its headers; past them
    /// the request is answered 408 `request_timeout`.
    pub body_timeout_s: u64,
    /// Seconds a connection may go without a byte read or written while none of its
    /// requests is being served (idle keep-alive, a response not read), before it is closed.
    pub idle_timeout_s: u64,
    /// Per shard replica, MiB of record texts kept decompressed for repeated reads
    /// (0: every read extracts from the compressed segment).
    pub record_cache_mb: u64,
    /// Records a shard's log table holds before it is sealed into a sorted batch (and,
    /// later, compacted into a segment, which is what a cluster's indexer publishes).
    pub log_table_max_records: usize,
    /// Bearer token for reads (none: auth off unless another token is set).
    pub read_token: Option<String>,
    /// Bearer token for reads and record writes.
    pub write_token: Option<String>,
    /// Bearer token for everything.
    pub admin_token: Option<String>,
    /// Tables' layout and the adaptive node (`[adapt]` in the file).
    pub adapt: AdaptConfig,
    /// Choosing subspaces from the workload (`[hyperspace]` in the file).
    pub hyperspace: HyperspaceConfig,
}

/// The configurator of subspaces (hyperspace hashing; docs/subspaces.md).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HyperspaceConfig {
    /// Whether the configurator builds and drops subspaces by itself (off: it only
    /// profiles tables that have subspaces and ranks configurations).
    pub auto: bool,
    /// Seconds between two configurator passes.
    pub interval_s: u64,
    /// Seconds of operations the profile covers.
    pub window_s: u32,
    /// Regions of each subspace the configurator builds.
    pub regions: u32,
    /// How much faster (a fraction) a configuration must be predicted to replace the
    /// current one.
    pub switch_margin: f64,
    /// How far below the best (a fraction) a configuration may be predicted and still
    /// tie with it; of the ties, the one with the fewest copies is built.
    pub tie_margin: f64,
    /// The model's parameters as `puffer-bench hyperspace --calibrate` measured them on
    /// this machine: `beta_s_per_object`, `alpha`, `max_throughput_ops_per_s` (all or
    /// none; without them the configurator ranks nothing).
    pub beta_s_per_object: Option<f64>,
    /// See `beta_s_per_object`.
    pub alpha: Option<f64>,
    /// See `beta_s_per_object`.
    pub max_throughput_ops_per_s: Option<f64>,
    /// Seconds a search spends per region it asks, as the calibration measured it
    /// (optional with the three above; 0 without it, as in the paper's model).
    pub region_cost_s: Option<f64>,
    /// Seconds a search spends per row a region sends back, as the calibration measured
    /// it (optional with the three above; 0 without it, as in the paper's model).
    pub sent_row_cost_s: Option<f64>,
    /// Seconds a search spends per region it asks beyond the first, as the calibration
    /// measured it (optional with the three above; 0 without it).
    pub fan_out_cost_s: Option<f64>,
    /// Seconds a search spends per condition per region it asks, as the calibration
    /// measured it (optional with the three above; 0 without it).
    pub condition_cost_s: Option<f64>,
    /// Seconds a search spends per row per second written into the regions it asks, as
    /// the calibration measured it (optional with the three above; 0 without it).
    pub write_rate_cost_s2: Option<f64>,
    /// Seconds a search waits per update per second written through its node (on a
    /// cluster, until the data nodes have applied the node's newest write), as the
    /// calibration measured it (optional with the three above; 0 without it).
    pub catch_up_cost_s2: Option<f64>,
    /// Seconds a written row stays where a search reads it without a segment's walks
    /// (log tables, sorted batches), as the calibration measured it (optional with the
    /// three above; 0 without it).
    pub fresh_window_s: Option<f64>,
    /// Seconds of the machine a second that a region written without pause costs
    /// besides its copies, as the calibration measured it (optional with the three
    /// above; 0 without it).
    pub region_upkeep_s_per_s: Option<f64>,
    /// Copies a second into a region at which its upkeep is half the above, as the
    /// calibration measured it (optional with the three above; 0 without it: the upkeep
    /// whatever the copies).
    pub upkeep_half_rate_per_s: Option<f64>,
    /// Seconds of an update that do not grow with its copies (its fetch and its SCU's
    /// commit), as the calibration measured it (optional with the three above; without
    /// it, equation 4's `1 / max_throughput_ops_per_s`).
    pub update_fixed_cost_s: Option<f64>,
}

impl Default for HyperspaceConfig {
    fn default() -> Self {
        let options = puffer_node::hyperspace::HyperspaceOptions::default();
        HyperspaceConfig {
            auto: options.auto,
            interval_s: options.interval.as_secs(),
            window_s: options.profiler.window_buckets,
            regions: options.regions,
            switch_margin: options.switch_margin,
            tie_margin: options.tie_margin,
            beta_s_per_object: None,
            alpha: None,
            max_throughput_ops_per_s: None,
            region_cost_s: None,
            sent_row_cost_s: None,
            fan_out_cost_s: None,
            condition_cost_s: None,
            write_rate_cost_s2: None,
            catch_up_cost_s2: None,
            fresh_window_s: None,
            region_upkeep_s_per_s: None,
            upkeep_half_rate_per_s: None,
            update_fixed_cost_s: None,
        }
    }
}

impl HyperspaceConfig {
    /// The database's options these settings describe, and the calibration if given;
    /// the error names a bad setting.
    pub fn options(
        &self,
    ) -> Result<
        (
            puffer_node::hyperspace::HyperspaceOptions,
            Option<puffer_node::hyperspace::MeasuredCalibration>,
        ),
        ApiError,
    > {
        let invalid = |what: String| ApiError::invalid(format!("bad [hyperspace] setting: {what}"));
        if !(1..=3600).contains(&self.interval_s) {
            return Err(invalid(format!(
                "interval_s is 1 to 3600, got {}",
                self.interval_s
            )));
        }
        let max_window = puffer_adapt::hyperspace::ProfilerConfig::MAX_WINDOW_BUCKETS;
        if !(1..=max_window).contains(&self.window_s) {
            return Err(invalid(format!(
                "window_s is 1 to {max_window}, got {}",
                self.window_s
            )));
        }
        if !(1..=puffer_node::layout::MAX_SHARDS).contains(&self.regions) {
            return Err(invalid(format!(
                "regions is 1 to 256, got {}",
                self.regions
            )));
        }
        if !(self.switch_margin.is_finite() && (0.0..=10.0).contains(&self.switch_margin)) {
            return Err(invalid(format!(
                "switch_margin is 0 to 10, got {}",
                self.switch_margin
            )));
        }
        if !(self.tie_margin.is_finite() && (0.0..=1.0).contains(&self.tie_margin)) {
            return Err(invalid(format!(
                "tie_margin is 0 to 1, got {}",
                self.tie_margin
            )));
        }
        let defaults = puffer_node::hyperspace::HyperspaceOptions::default();
        let options = puffer_node::hyperspace::HyperspaceOptions {
            auto: self.auto,
            interval: std::time::Duration::from_secs(self.interval_s),
            profiler: puffer_adapt::hyperspace::ProfilerConfig {
                bucket_width_ms: 1000,
                window_buckets: self.window_s,
                ..defaults.profiler
            },
            regions: self.regions,
            switch_margin: self.switch_margin,
            tie_margin: self.tie_margin,
            ..defaults
        };
        let calibration = match (
            self.beta_s_per_object,
            self.alpha,
            self.max_throughput_ops_per_s,
        ) {
            (None, None, None)
                if self.region_cost_s.is_some()
                    || self.sent_row_cost_s.is_some()
                    || self.fan_out_cost_s.is_some()
                    || self.condition_cost_s.is_some()
                    || self.write_rate_cost_s2.is_some()
                    || self.catch_up_cost_s2.is_some()
                    || self.fresh_window_s.is_some()
                    || self.region_upkeep_s_per_s.is_some()
                    || self.upkeep_half_rate_per_s.is_some()
                    || self.update_fixed_cost_s.is_some() =>
            {
                return Err(invalid(
                    "region_cost_s, fan_out_cost_s, condition_cost_s, sent_row_cost_s, \
                     write_rate_cost_s2, catch_up_cost_s2, fresh_window_s, region_upkeep_s_per_s, \
                     upkeep_half_rate_per_s and update_fixed_cost_s need beta_s_per_object, alpha and \
                     max_throughput_ops_per_s"
                        .into(),
                ))
            }
            (None, None, None) => None,
            (Some(beta_s_per_object), Some(alpha), Some(max_throughput_ops_per_s)) => {
                let measured = puffer_node::hyperspace::MeasuredCalibration {
                    beta_s_per_object,
                    region_cost_s: self.region_cost_s.unwrap_or(0.0),
                    fan_out_cost_s: self.fan_out_cost_s.unwrap_or(0.0),
                    condition_cost_s: self.condition_cost_s.unwrap_or(0.0),
                    sent_row_cost_s: self.sent_row_cost_s.unwrap_or(0.0),
                    write_rate_cost_s2: self.write_rate_cost_s2.unwrap_or(0.0),
                    catch_up_cost_s2: self.catch_up_cost_s2.unwrap_or(0.0),
                    fresh_window_s: self.fresh_window_s.unwrap_or(0.0),
                    region_upkeep_s_per_s: self.region_upkeep_s_per_s.unwrap_or(0.0),
                    upkeep_half_rate_per_s: self.upkeep_half_rate_per_s.unwrap_or(0.0),
                    alpha,
                    max_throughput_ops_per_s,
                    update_fixed_cost_s: self.update_fixed_cost_s,
                };
                measured.check().map_err(|e| invalid(e.to_string()))?;
                Some(measured)
            }
            _ => {
                return Err(invalid(
                    "beta_s_per_object, alpha and max_throughput_ops_per_s go together".into(),
                ))
            }
        };
        Ok((options, calibration))
    }
}

/// Shards, replicas, queues and the layer manager (BlowFish on one node).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdaptConfig {
    /// Shards of a table created without a count.
    pub shards: u32,
    /// Replicas per shard of a table created without a count.
    pub replicas: u32,
    /// Queue sampling period, milliseconds.
    pub delta_ms: u64,
    /// Weight of the newest queue sample in the average.
    pub alpha: f64,
    /// High marks on the averaged queue, per layer count (the last one repeats).
    pub high_marks: Vec<f64>,
    /// Low marks, per layer count.
    pub low_marks: Vec<f64>,
    /// Least seconds between two layer changes of one replica.
    pub hold_seconds: f64,
    /// Least seconds a replica keeps its layers after a change before idleness drops one.
    pub idle_drop_after_seconds: f64,
    /// An idle replica drops a layer only if its arrivals are at most this fraction of
    /// what one layer fewer sustains.
    pub drop_headroom: f64,
    /// Memory for all replicas' indexes, MiB.
    pub memory_budget_mb: u64,
    /// `opportunistic` (default) or `dedicated`.
    pub construction: String,
    /// Bound of each replica's request queue.
    pub queue_capacity: usize,
    /// Worker threads per replica (0: one per core).
    pub workers_per_replica: usize,
    /// Whether the layer manager runs (false: layers change only by hand).
    pub automatic: bool,
    /// Whether the layer manager buys attribute layers (docs/layers.md).
    pub attribute_layers: bool,
    /// Rows found through an attribute per second at which its layer is bought.
    pub attribute_buy_rows_per_second: f64,
}

impl Default for AdaptConfig {
    fn default() -> Self {
        let node = puffer_node::serving::NodeConfig::default();
        AdaptConfig {
            shards: 1,
            replicas: 1,
            delta_ms: node.delta.as_millis() as u64,
            alpha: node.alpha,
            high_marks: vec![node.manager.marks.high(1)],
            low_marks: vec![node.manager.marks.low(1)],
            hold_seconds: node.manager.hold_seconds,
            idle_drop_after_seconds: node.manager.idle_drop_after_seconds,
            drop_headroom: node.manager.drop_headroom,
            memory_budget_mb: 4096,
            construction: "opportunistic".into(),
            queue_capacity: node.queue_capacity,
            workers_per_replica: 0,
            automatic: true,
            attribute_layers: node.attributes.enabled,
            attribute_buy_rows_per_second: node.attributes.buy_rows_per_second,
        }
    }
}

impl AdaptConfig {
    /// The database options these settings describe; the error names a bad setting.
    pub fn database_options(&self) -> Result<puffer_node::DatabaseOptions, ApiError> {
        use puffer_node::serving::NodeConfig;
        let invalid = |what: String| ApiError::invalid(format!("bad [adapt] setting: {what}"));
        let marks = puffer_adapt::Marks::new(self.high_marks.clone(), self.low_marks.clone())
            .map_err(|e| invalid(e.to_string()))?;
        let construction = match self.construction.as_str() {
            "opportunistic" => puffer_index::Construction::Opportunistic,
            "dedicated" => puffer_index::Construction::Dedicated,
            other => {
                return Err(invalid(format!(
                    "construction must be opportunistic or dedicated, got {other:?}"
                )))
            }
        };
        let defaults = NodeConfig::default();
        let node = NodeConfig {
            delta: std::time::Duration::from_millis(self.delta_ms),
            alpha: self.alpha,
            manager: puffer_adapt::ManagerConfig {
                marks,
                hold_seconds: self.hold_seconds,
                idle_drop_after_seconds: self.idle_drop_after_seconds,
                drop_headroom: self.drop_headroom,
            },
            attributes: puffer_adapt::attributes::AttributeConfig {
                enabled: self.attribute_layers,
                buy_rows_per_second: self.attribute_buy_rows_per_second,
                ..defaults.attributes.clone()
            },
            memory_budget_bytes: self.memory_budget_mb.saturating_mul(1 << 20),
            construction,
            queue_capacity: self.queue_capacity,
            workers_per_replica: if self.workers_per_replica == 0 {
                defaults.workers_per_replica
            } else {
                self.workers_per_replica
            },
            automatic: self.automatic,
            ..defaults
        };
        node.validate().map_err(|e| invalid(e.to_string()))?;
        let layout = puffer_node::TableLayout {
            shards: self.shards,
            replicas: self.replicas,
        };
        layout.validate().map_err(|e| invalid(e.to_string()))?;
        Ok(puffer_node::DatabaseOptions {
            shard: puffer_store::ShardOptions::default(),
            node,
            default_layout: layout,
            ..puffer_node::DatabaseOptions::default()
        })
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            data_dir: PathBuf::from("puffer-data"),
            listen: SocketAddr::from(([127, 0, 0, 1], 7878)),
            max_body_bytes: 16 << 20,
            max_batch_records: 100_000,
            max_result_rows: 100_000,
            max_pattern_bytes: 4096,
            max_text_bytes: 1 << 30,
            max_concurrent_requests: 256,
            max_buffered_body_mb: 256,
            max_connections: 1024,
            header_timeout_s: 10,
            body_timeout_s: 60,
            idle_timeout_s: 60,
            record_cache_mb: puffer_store::ShardOptions::default().record_cache_bytes >> 20,
            log_table_max_records: puffer_store::ShardOptions::default().log_table_max_records,
            read_token: None,
            write_token: None,
            admin_token: None,
            adapt: AdaptConfig::default(),
            hyperspace: HyperspaceConfig::default(),
        }
    }
}

impl ServerConfig {
    /// Defaults, overridden by `file` (TOML) if given, then by the environment.
    pub fn load(file: Option<&Path>) -> Result<ServerConfig, ApiError> {
        let mut config = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    ApiError::invalid(format!("cannot read config {}: {e}", path.display()))
                })?;
                toml::from_str(&text)
                    .map_err(|e| ApiError::invalid(format!("bad config {}: {e}", path.display())))?
            }
            None => ServerConfig::default(),
        };
        config.apply_env(|name| std::env::var(name).ok())?;
        Ok(config)
    }

    /// Applies `PUFFER_DATA`, `PUFFER_LISTEN`, `PUFFER_READ_TOKEN`, `PUFFER_WRITE_TOKEN`,
    /// `PUFFER_ADMIN_TOKEN`, `PUFFER_MAX_BODY_BYTES`, `PUFFER_MAX_BATCH_RECORDS`,
    /// `PUFFER_MAX_RESULT_ROWS`, `PUFFER_MAX_CONCURRENT_REQUESTS`, `PUFFER_RECORD_CACHE_MB`,
    /// `PUFFER_LOG_TABLE_MAX_RECORDS`, `PUFFER_MAX_CONNECTIONS`, `PUFFER_HEADER_TIMEOUT_S`,
    /// `PUFFER_BODY_TIMEOUT_S`, `PUFFER_IDLE_TIMEOUT_S`, `PUFFER_MAX_BUFFERED_BODY_MB`.
    pub fn apply_env(&mut self, var: impl Fn(&str) -> Option<String>) -> Result<(), ApiError> {
        let number = |name: &str, text: String| {
            text.parse::<usize>()
                .map_err(|_| ApiError::invalid(format!("{name}={text} is not a number")))
        };
        if let Some(dir) = var("PUFFER_DATA") {
            self.data_dir = PathBuf::from(dir);
        }
        if let Some(listen) = var("PUFFER_LISTEN") {
            self.listen = listen.parse().map_err(|_| {
                ApiError::invalid(format!("PUFFER_LISTEN={listen} is not an address"))
            })?;
        }
        for (name, slot) in [
            ("PUFFER_READ_TOKEN", &mut self.read_token),
            ("PUFFER_WRITE_TOKEN", &mut self.write_token),
            ("PUFFER_ADMIN_TOKEN", &mut self.admin_token),
        ] {
            if let Some(token) = var(name) {
                *slot = Some(token);
            }
        }
        for (name, slot) in [
            ("PUFFER_MAX_BODY_BYTES", &mut self.max_body_bytes),
            ("PUFFER_MAX_BATCH_RECORDS", &mut self.max_batch_records),
            ("PUFFER_MAX_RESULT_ROWS", &mut self.max_result_rows),
            (
                "PUFFER_MAX_CONCURRENT_REQUESTS",
                &mut self.max_concurrent_requests,
            ),
            (
                "PUFFER_LOG_TABLE_MAX_RECORDS",
                &mut self.log_table_max_records,
            ),
            ("PUFFER_MAX_CONNECTIONS", &mut self.max_connections),
        ] {
            if let Some(text) = var(name) {
                *slot = number(name, text)?;
            }
        }
        for (name, slot) in [
            ("PUFFER_HEADER_TIMEOUT_S", &mut self.header_timeout_s),
            ("PUFFER_BODY_TIMEOUT_S", &mut self.body_timeout_s),
            ("PUFFER_IDLE_TIMEOUT_S", &mut self.idle_timeout_s),
        ] {
            if let Some(text) = var(name) {
                *slot = number(name, text)? as u64;
            }
        }
        if let Some(text) = var("PUFFER_MAX_BUFFERED_BODY_MB") {
            self.max_buffered_body_mb = number("PUFFER_MAX_BUFFERED_BODY_MB", text)? as u64;
        }
        if let Some(text) = var("PUFFER_RECORD_CACHE_MB") {
            self.record_cache_mb = number("PUFFER_RECORD_CACHE_MB", text)? as u64;
        }
        Ok(())
    }

    /// The connection bounds, checked (each at least 1, the timeouts at most a day), after
    /// checking the body budget (`max_buffered_body_mb`) they go with.
    pub fn connection_limits(&self) -> Result<crate::connections::ConnectionLimits, ApiError> {
        if self.max_buffered_body_mb << 20 < self.max_body_bytes as u64
            || self.max_buffered_body_mb > MAX_BUFFERED_BODY_MB
        {
            return Err(ApiError::invalid(format!(
                "max_buffered_body_mb is between max_body_bytes ({} MiB) and {MAX_BUFFERED_BODY_MB}, got {}",
                (self.max_body_bytes as u64).div_ceil(1 << 20),
                self.max_buffered_body_mb
            )));
        }
        const DAY_S: u64 = 24 * 3600;
        for (name, seconds) in [
            ("header_timeout_s", self.header_timeout_s),
            ("body_timeout_s", self.body_timeout_s),
            ("idle_timeout_s", self.idle_timeout_s),
        ] {
            if !(1..=DAY_S).contains(&seconds) {
                return Err(ApiError::invalid(format!(
                    "{name} is between 1 and {DAY_S}, got {seconds}"
                )));
            }
        }
        if self.max_connections == 0 {
            return Err(ApiError::invalid("max_connections is at least 1, got 0"));
        }
        Ok(crate::connections::ConnectionLimits {
            max_connections: self.max_connections,
            header_timeout: std::time::Duration::from_secs(self.header_timeout_s),
            idle_timeout: std::time::Duration::from_secs(self.idle_timeout_s),
        })
    }

    /// Whether any token is configured (then every /v1 request needs one).
    pub fn auth_enabled(&self) -> bool {
        self.read_token.is_some() || self.write_token.is_some() || self.admin_token.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hyperspace_settings_are_checked_and_a_calibration_goes_whole() {
        let defaults = HyperspaceConfig::default();
        let (options, calibration) = defaults.options().unwrap();
        assert!(!options.auto);
        assert_eq!(calibration, None);
        let parsed: ServerConfig = toml::from_str(
            "[hyperspace]\nauto = true\ninterval_s = 3\nwindow_s = 20\nregions = 64\n\
             beta_s_per_object = 3.5e-7\nalpha = 0.3\nmax_throughput_ops_per_s = 15000\n",
        )
        .unwrap();
        let (options, calibration) = parsed.hyperspace.options().unwrap();
        assert!(options.auto);
        assert_eq!(options.interval.as_secs(), 3);
        assert_eq!(options.profiler.window_buckets, 20);
        assert_eq!(options.regions, 64);
        let calibration = calibration.unwrap();
        assert_eq!(calibration.alpha, 0.3);
        assert_eq!(calibration.update_fixed_cost_s, None);
        let parsed: ServerConfig = toml::from_str(
            "[hyperspace]\nbeta_s_per_object = 3.5e-7\nalpha = 0.3\n\
             max_throughput_ops_per_s = 15000\nupdate_fixed_cost_s = 0.004\n",
        )
        .unwrap();
        let (_, calibration) = parsed.hyperspace.options().unwrap();
        assert_eq!(calibration.unwrap().update_fixed_cost_s, Some(0.004));
        let bad = [
            (
                HyperspaceConfig {
                    interval_s: 0,
                    ..defaults.clone()
                },
                "interval_s",
            ),
            (
                HyperspaceConfig {
                    window_s: 0,
                    ..defaults.clone()
                },
                "window_s",
            ),
            (
                HyperspaceConfig {
                    regions: 257,
                    ..defaults.clone()
                },
                "regions",
            ),
            (
                HyperspaceConfig {
                    switch_margin: f64::NAN,
                    ..defaults.clone()
                },
                "switch_margin",
            ),
            (
                HyperspaceConfig {
                    tie_margin: 1.5,
                    ..defaults.clone()
                },
                "tie_margin",
            ),
            (
                HyperspaceConfig {
                    alpha: Some(1.0),
                    ..defaults.clone()
                },
                "go together",
            ),
            (
                HyperspaceConfig {
                    beta_s_per_object: Some(-1.0),
                    alpha: Some(1.0),
                    max_throughput_ops_per_s: Some(10.0),
                    ..defaults.clone()
                },
                "beta",
            ),
            (
                HyperspaceConfig {
                    update_fixed_cost_s: Some(0.004),
                    ..defaults.clone()
                },
                "need beta_s_per_object",
            ),
            (
                HyperspaceConfig {
                    beta_s_per_object: Some(1e-6),
                    alpha: Some(1.0),
                    max_throughput_ops_per_s: Some(10.0),
                    update_fixed_cost_s: Some(-1.0),
                    ..defaults.clone()
                },
                "update_fixed_cost_s",
            ),
            (
                HyperspaceConfig {
                    region_upkeep_s_per_s: Some(1e-3),
                    ..defaults.clone()
                },
                "need beta_s_per_object",
            ),
            (
                HyperspaceConfig {
                    beta_s_per_object: Some(1e-6),
                    alpha: Some(1.0),
                    max_throughput_ops_per_s: Some(10.0),
                    region_upkeep_s_per_s: Some(1e-3),
                    upkeep_half_rate_per_s: Some(-5.0),
                    ..defaults.clone()
                },
                "upkeep_half_rate_per_s",
            ),
        ];
        for (config, says) in bad {
            let error = config.options().unwrap_err().to_string();
            assert!(error.contains(says), "{error:?} should name {says:?}");
        }
    }

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        }
    }

    /// Every `[adapt]` switch reaches the node's settings (`automatic` once did not).
    #[test]
    fn adapt_switches_reach_the_node() {
        for (automatic, attribute_layers) in [(false, true), (true, false)] {
            let adapt = AdaptConfig {
                automatic,
                attribute_layers,
                attribute_buy_rows_per_second: 1234.0,
                ..AdaptConfig::default()
            };
            let node = adapt.database_options().unwrap().node;
            assert_eq!(node.automatic, automatic);
            assert_eq!(node.attributes.enabled, attribute_layers);
            assert_eq!(node.attributes.buy_rows_per_second, 1234.0);
        }
        let bad = AdaptConfig {
            attribute_buy_rows_per_second: -1.0,
            ..AdaptConfig::default()
        };
        let error = bad.database_options().unwrap_err().to_string();
        assert!(error.contains("buy_rows_per_second"), "{error}");
    }

    #[test]
    fn environment_overrides_the_record_cache_and_bad_numbers_are_named() {
        let mut config = ServerConfig::default();
        config
            .apply_env(env(&[("PUFFER_RECORD_CACHE_MB", "0")]))
            .unwrap();
        assert_eq!(config.record_cache_mb, 0);
        let error = config
            .apply_env(env(&[("PUFFER_RECORD_CACHE_MB", "lots")]))
            .unwrap_err();
        assert!(
            error.to_string().contains("PUFFER_RECORD_CACHE_MB=lots"),
            "{error}"
        );
    }

    #[test]
    fn an_oversized_record_cache_is_refused_before_anything_opens() {
        let dir = tempfile::tempdir().unwrap();
        let config = ServerConfig {
            data_dir: dir.path().join("data"),
            record_cache_mb: MAX_RECORD_CACHE_MB + 1,
            ..ServerConfig::default()
        };
        let error = crate::AppState::open(config).err().expect("refused");
        assert!(error.to_string().contains("record_cache_mb"), "{error}");
        assert!(!dir.path().join("data").exists());
    }
}
