//! Choosing subspaces from the workload (see [`crate::hyperspace`]): the profiler fed by
//! the searches and updates served, and one configurator pass per table, run by the
//! database's owner ([`Database::tune_tables`], every
//! [`HyperspaceOptions::interval`](crate::hyperspace::HyperspaceOptions)).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use puffer_adapt::hyperspace::{
    candidate_configurations, decide, rank_configurations, AnalyserConfig, AttributeSet,
    Configuration, DecisionReason, Deployment, Margins, RankedConfiguration, SearchShape,
    WorkloadProfile,
};
use puffer_query::{QueryError, Result};
use puffer_store::{AttrType, Predicate, Query, ReadOptions, Record, WriteOp};

use super::Database;
use crate::hyperspace::{
    calibration, changed_attributes, config_error, configuration_of, constraint_name, names,
    search_shape, view_of, HyperspaceOptions, MeasuredCalibration, RankedView, Reconfiguration,
    RowSample, TableTuning, TableTuningView, MAX_PAGES_TRACKED, MAX_RANKING_SHOWN,
};
use crate::message::ReadRequest;
use crate::remote::{LeaderRequest, Remote, ServedSearches, MAX_SENT_SHAPES};
use crate::subspace::Current;
use crate::table::Table;

/// Records sampled for the widths of ranges and the rows searches find.
const SAMPLE_RECORDS: usize = 4096;

/// Records read to take the sample from, evenly spaced in key order: the whole table up
/// to this many, its first this many keys beyond (a bound on each configurator pass).
const SAMPLED_FROM_RECORDS: usize = 65_536;

/// The database's profiles and configurator state.
pub(crate) struct Tuning {
    options: HyperspaceOptions,
    started: Instant,
    calibration: Mutex<Option<MeasuredCalibration>>,
    /// Per table uid.
    tables: Mutex<HashMap<u64, TableTuning>>,
}

impl Tuning {
    pub(crate) fn new(options: HyperspaceOptions) -> Tuning {
        Tuning {
            options,
            started: Instant::now(),
            calibration: Mutex::new(None),
            tables: Mutex::new(HashMap::new()),
        }
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Runs `f` on table `uid`'s state (made if missing), the clock read under the lock
    /// so that the profiler sees time never go back.
    fn with_table<T>(&self, uid: u64, f: impl FnOnce(&mut TableTuning, u64) -> T) -> Result<T> {
        let mut tables = self.tables.lock().expect("tuning lock");
        let tuning = match tables.entry(uid) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(TableTuning::new(self.options.profiler)?)
            }
        };
        let now = self.now_ms();
        Ok(f(tuning, now))
    }
}

impl Database {
    /// Whether table `table`'s operations are profiled: every plain table when the
    /// configurator applies its decisions, else the tables with subspaces.
    pub(super) fn profiling(&self, table: &Table) -> bool {
        let plain = table.partition().is_none()
            && table.chunk_of().is_none()
            && table.subspace_of().is_none();
        plain && (self.tuning.options.auto || !self.subspaces_of(table.name()).is_empty())
    }

    /// Counts a search or count of `table` (`request`) in its profile, and the page
    /// it asks for.
    pub(super) fn profile_search(&self, table: &Table, request: &ReadRequest) {
        let Some(predicate) = request.predicate() else {
            return;
        };
        if !self.profiling(table) {
            return;
        }
        let page_rows = match request {
            ReadRequest::Search { query } | ReadRequest::Columns { query } => {
                query.limit.map(|rows| rows as u64)
            }
            _ => None,
        };
        let schema = table.schema();
        let sends = self.handing_on().is_some();
        // A shape the profiler refuses (too many attributes) is not counted.
        let _ = self.tuning.with_table(table.uid(), |tuning, now| {
            let shape = search_shape(predicate, &schema, &tuning.numbers);
            tuning.profiler.record_search(now, &shape, 1)?;
            if sends {
                tuning.unsent.record_search(now, &shape, 1)?;
            }
            if tuning.pages.len() >= MAX_PAGES_TRACKED && !tuning.pages.contains_key(&shape) {
                tuning.pages.clear();
            }
            tuning.pages.insert(shape, page_rows);
            Ok::<(), puffer_adapt::ConfigError>(())
        });
    }

    /// Counts the updates of `ops` on `table`, whose keys' records were `before`.
    pub(super) fn profile_updates(&self, table: &Table, ops: &[WriteOp], before: &Current) {
        let schema = table.schema();
        let mut current = before.clone();
        let _ = self.tuning.with_table(table.uid(), |tuning, now| {
            for op in ops {
                let key = match op {
                    WriteOp::Put(record) => &record.key,
                    WriteOp::PutFields(fields) => &fields.key,
                    WriteOp::Delete(key) => key,
                    WriteOp::AddAttribute(_) => continue,
                };
                let old = current.get(key).cloned().flatten();
                if let Some(changed) = changed_attributes(op, old.as_ref(), &schema) {
                    let _ = tuning.profiler.record_update(now, &changed, 1);
                }
                let new = match op {
                    WriteOp::Put(record) => Some(record.clone()),
                    WriteOp::PutFields(fields) => {
                        Some(crate::subspace::record_of_fields(fields, &schema))
                    }
                    _ => None,
                };
                current.insert(key.clone(), new);
            }
        });
    }

    /// Sets the model's parameters, as measured (`puffer-bench hyperspace --calibrate`);
    /// without them the configurator ranks nothing.
    pub fn set_hyperspace_calibration(&self, measured: MeasuredCalibration) -> Result<()> {
        measured.check()?;
        *self.tuning.calibration.lock().expect("calibration lock") = Some(measured);
        Ok(())
    }

    /// The model's parameters, if set.
    pub fn hyperspace_calibration(&self) -> Option<MeasuredCalibration> {
        *self.tuning.calibration.lock().expect("calibration lock")
    }

    /// What the configurator shows of table `table`: its profile, the ranking of the
    /// last pass, the last decision and reconfiguration.
    pub fn hyperspace_status(&self, table: &str) -> Result<TableTuningView> {
        let table = self.table(table)?;
        let schema = table.schema();
        self.tuning.with_table(table.uid(), |tuning, now| {
            let mut view = tuning.view.clone();
            if let Ok(counts) = tuning.profiler.search_counts(now) {
                view.profile.searches = counts
                    .into_iter()
                    .map(|(shape, n)| {
                        let mut shown: std::collections::BTreeMap<String, String> = shape
                            .attributes
                            .iter()
                            .map(|(id, c)| (names(&[*id], &schema)[0].clone(), constraint_name(*c)))
                            .collect();
                        if let Some(key) = shape.key {
                            shown.insert(schema.key.clone(), constraint_name(key));
                        }
                        (shown, n)
                    })
                    .collect();
            }
            if let Ok(counts) = tuning.profiler.update_counts(now) {
                view.profile.updates = counts
                    .into_iter()
                    .map(|(set, n)| (names(&set.into_iter().collect::<Vec<_>>(), &schema), n))
                    .collect();
            }
            view
        })
    }

    /// Counts searches another node served on table `table` (uid `uid`) in its
    /// profile: the cluster's configurator runs on the ingest leader, where every
    /// write passes, and hears of the searches from the nodes that served them.
    pub(super) fn take_served_searches(
        &self,
        table: &str,
        uid: u64,
        searches: &[ServedSearches],
    ) -> Result<()> {
        let table = self.table(table)?;
        if table.uid() != uid {
            return Err(QueryError::UnknownTable(format!(
                "{} with uid {uid} (it was dropped; the table of that name now has uid {})",
                table.name(),
                table.uid()
            )));
        }
        if searches.len() > MAX_SENT_SHAPES {
            return Err(QueryError::Limit(format!(
                "at most {MAX_SENT_SHAPES} search shapes are sent at once; got {}",
                searches.len()
            )));
        }
        if !self.profiling(&table) {
            return Ok(());
        }
        self.tuning.with_table(table.uid(), |tuning, now| {
            for served in searches {
                tuning
                    .profiler
                    .record_search(now, &served.shape, served.count)
                    .map_err(config_error)?;
                if tuning.pages.len() >= MAX_PAGES_TRACKED
                    && !tuning.pages.contains_key(&served.shape)
                {
                    tuning.pages.clear();
                }
                tuning.pages.insert(served.shape.clone(), served.page_rows);
            }
            Ok(())
        })?
    }

    /// On a cluster node that does not lead: the widths of ranges from a sample of
    /// the table (read where it is held), and the searches served since the last pass
    /// sent to the leader, whose configurator decides.
    fn send_searches(&self, table: &Table, remote: &Arc<dyn Remote>) -> Result<()> {
        let config = self.tuning.options.profiler;
        let (searches, sampled) = self.tuning.with_table(table.uid(), |tuning, now| {
            let counts = tuning.unsent.search_counts(now).map_err(config_error)?;
            tuning.unsent =
                puffer_adapt::hyperspace::Profiler::new(config).map_err(config_error)?;
            Ok::<_, QueryError>((
                counts
                    .into_iter()
                    .take(MAX_SENT_SHAPES)
                    .map(|(shape, count)| ServedSearches {
                        page_rows: tuning.pages.get(&shape).copied().flatten(),
                        shape,
                        count,
                    })
                    .collect::<Vec<_>>(),
                !tuning.numbers.is_empty(),
            ))
        })??;
        // The sample (read through the broker on a node without data) only when there
        // were searches, or ranges have no widths yet: an idle pass reads nothing.
        if !searches.is_empty() || !sampled {
            let numeric = numeric_attributes(&table.schema());
            let records = self.sample_records(table, &numeric)?;
            self.set_numbers(table, &numeric, &records)?;
        }
        let sent: u64 = searches.iter().map(|s| s.count).sum();
        if !searches.is_empty() {
            // Failing (no leader now), these counts are lost: a profile is statistics,
            // and the next pass sends what comes after.
            remote.lead(LeaderRequest::Searches {
                table: table.name().to_string(),
                uid: table.uid(),
                searches,
            })?;
        }
        self.tuning.with_table(table.uid(), |tuning, _| {
            tuning.view.decision = Some(format!(
                "the ingest leader configures this table: {sent} searches sent to it at \
                 the last pass"
            ));
        })
    }

    /// One configurator pass over every profiled table (see [`Database::tune_table`]);
    /// a table's failure is recorded in its status and does not stop the others. On
    /// a cluster node that does not lead, the pass sends the searches it served to
    /// the leader instead.
    pub fn tune_tables(&self) {
        for table in self.all_tables() {
            if self.profiling(&table) {
                let passed = match self.handing_on() {
                    Some(remote) => self.send_searches(&table, remote),
                    None => self.tune_table(table.name()).map(|_| ()),
                };
                if let Err(e) = passed {
                    let _ = self.tuning.with_table(table.uid(), |tuning, _| {
                        tuning.view.decision = Some(format!("failed: {e}"));
                    });
                }
            }
        }
    }

    /// The table's current configuration: its ready subspaces (attribute names,
    /// regions).
    fn current_subspaces(&self, table: &str) -> Vec<(Vec<String>, u32)> {
        self.describe_subspaces(table)
            .into_iter()
            .filter(|s| s.ready)
            .map(|s| (s.attributes, s.regions))
            .collect()
    }

    /// One configurator pass over table `table`: its profile over the window, the
    /// candidate configurations, their predicted throughput, the decision; with
    /// [`HyperspaceOptions::auto`], a switch applied (new subspaces built, then the old
    /// ones dropped). Returns whether it switched.
    pub fn tune_table(&self, name: &str) -> Result<bool> {
        let table = self.table(name)?;
        let schema = table.schema();
        let (profile, pages) = self.tuning.with_table(table.uid(), |tuning, now| {
            (tuning.profiler.profile(now), tuning.pages.clone())
        })?;
        let mut profile = profile.map_err(config_error)?;
        // One sample per pass: the numeric attributes (for the widths of ranges) and
        // the searched ones (for the rows searches find).
        let numeric = numeric_attributes(&schema);
        let searched = searched_attributes(&profile);
        let sampled: AttributeSet = numeric.iter().chain(&searched).copied().collect();
        let records = self.sample_records(&table, &sampled)?;
        self.set_numbers(&table, &numeric, &records)?;
        let objects = table.count(&Predicate::All, ReadOptions::default())?.0;
        fill_search_rows(
            &records,
            objects,
            &schema,
            &searched,
            &mut profile,
            &|shape| pages.get(shape).copied().flatten(),
        );
        let record = |decision: String, ranking: Vec<RankedView>, current: Option<f64>| {
            self.tuning.with_table(table.uid(), |tuning, _| {
                tuning.view.decision = Some(decision);
                tuning.view.ranking = ranking;
                tuning.view.current_predicted_ops_per_s = current;
            })
        };
        if profile.searches.is_empty() && profile.updates.is_empty() {
            record("no operations in the window".into(), Vec::new(), None)?;
            return Ok(false);
        }
        let Some(measured) = self.hyperspace_calibration() else {
            record(
                "no calibration: run puffer-bench hyperspace --calibrate and set it".into(),
                Vec::new(),
                None,
            )?;
            return Ok(false);
        };
        let model = calibration(&measured, objects);
        let layout = table.layout();
        let options = &self.tuning.options;
        let deployment = Deployment {
            subspace_regions: options.regions,
            key_regions: layout.shards,
            replicas: layout.replicas,
        };
        let current_subspaces = self.current_subspaces(name);
        let current =
            configuration_of(&current_subspaces, &schema, layout.shards, layout.replicas)?;
        let mut candidates = candidate_configurations(
            &profile,
            &AnalyserConfig {
                max_subspace_attributes: options.max_subspace_attributes,
                max_subspaces: options.max_subspaces,
                max_candidates: 4096,
                deployment,
            },
        )
        .map_err(config_error)?;
        candidates.push(current.clone());
        let ranked = rank_configurations(&candidates, &profile, &model).map_err(config_error)?;
        let current_ranked = ranked
            .iter()
            .find(|r| r.configuration == current)
            .cloned()
            .expect("the current configuration is a candidate");
        let margins = Margins {
            switch: options.switch_margin,
            tie: options.tie_margin,
        };
        let decision = decide(&current_ranked, &ranked, margins).map_err(config_error)?;
        let shown: Vec<RankedView> = ranked
            .iter()
            .take(MAX_RANKING_SHOWN)
            .map(|r| RankedView {
                configuration: view_of(&r.configuration, &schema),
                predicted_ops_per_s: r.predicted_throughput_ops_per_s,
            })
            .collect();
        let words = match decision.reason {
            DecisionReason::NoCandidates => "no candidates".to_string(),
            DecisionReason::CurrentIsBest => "the current configuration is the best".to_string(),
            DecisionReason::WithinMargin { gain } => format!(
                "the best is {:.1} % faster, within the {:.0} % margin: kept",
                gain * 100.0,
                options.switch_margin.max(options.tie_margin) * 100.0
            ),
            DecisionReason::BeyondMargin { gain } => format!(
                "{} is {:.1} % faster{}",
                if options.tie_margin > 0.0 {
                    format!(
                        "the fewest copies among those within {:.1} % of the best",
                        options.tie_margin * 100.0
                    )
                } else {
                    "the best".to_string()
                },
                gain * 100.0,
                if options.auto {
                    ": switching"
                } else {
                    " (auto is off: not applied)"
                }
            ),
        };
        record(
            words,
            shown,
            Some(current_ranked.predicted_throughput_ops_per_s),
        )?;
        if !(decision.switch && options.auto) {
            return Ok(false);
        }
        let gain = match decision.reason {
            DecisionReason::BeyondMargin { gain } => gain,
            _ => 0.0,
        };
        self.apply_configuration(&table, &current_ranked, &decision.chosen, gain)?;
        Ok(true)
    }

    /// Moves table `table` from `current` to `chosen`: the subspaces `chosen` adds are
    /// built first (reads use them once each is ready), then those it lacks are dropped.
    /// Recorded as the table's last reconfiguration.
    fn apply_configuration(
        &self,
        table: &Table,
        current: &RankedConfiguration,
        chosen: &Configuration,
        predicted_gain: f64,
    ) -> Result<()> {
        let schema = table.schema();
        let started = Instant::now();
        let started_unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let wanted: BTreeSet<(Vec<String>, u32)> = view_of(chosen, &schema)
            .subspaces
            .into_iter()
            .map(|s| (s.attributes, s.regions))
            .collect();
        let wanted: Vec<(Vec<String>, u32)> = wanted.into_iter().collect();
        let result = self.set_subspaces(table.name(), &wanted);
        let reconfiguration = Reconfiguration {
            started_unix_ms,
            duration_ms: started.elapsed().as_millis() as u64,
            from: view_of(&current.configuration, &schema),
            to: view_of(chosen, &schema),
            predicted_gain,
            error: result.as_ref().err().map(|e| e.to_string()),
        };
        self.tuning.with_table(table.uid(), |tuning, _| {
            tuning.view.last_reconfiguration = Some(reconfiguration);
        })?;
        result
    }

    /// Gives table `table` exactly the subspaces `wanted` (attribute names, regions):
    /// those missing are built first (reads use each once it is ready), then those not
    /// wanted are dropped; where building first would pass the cap of subspaces per
    /// table, those not wanted are dropped first. A subspace over the same attributes
    /// with at most the regions asked counts as there.
    pub fn set_subspaces(&self, table: &str, wanted: &[(Vec<String>, u32)]) -> Result<()> {
        let existing = self.describe_subspaces(table);
        let missing: Vec<&(Vec<String>, u32)> = wanted
            .iter()
            .filter(|(attributes, regions)| {
                !existing
                    .iter()
                    .any(|s| sorted(&s.attributes) == sorted(attributes) && s.regions <= *regions)
            })
            .collect();
        let drop_unwanted = || -> Result<()> {
            for s in self.describe_subspaces(table) {
                let kept = wanted
                    .iter()
                    .any(|(attributes, _)| sorted(attributes) == sorted(&s.attributes));
                if !kept {
                    self.drop_subspace(table, &s.name)?;
                }
            }
            Ok(())
        };
        if existing.len() + missing.len() > crate::subspace::MAX_SUBSPACES_PER_TABLE {
            drop_unwanted()?;
        }
        for (attributes, regions) in missing {
            self.add_subspace(table, attributes, *regions)?;
        }
        drop_unwanted()
    }

    /// Gives every search of `profile` (on table `table`) the rows it finds, estimated
    /// from a sample of the table's records ([`RowSample::search_rows`]), each asking
    /// for the page `page_rows` gives its shape. The model then charges the rows a
    /// search reads rather than the objects of its regions.
    pub fn estimate_search_rows(
        &self,
        table: &str,
        profile: &mut WorkloadProfile,
        page_rows: &dyn Fn(&SearchShape) -> Option<u64>,
    ) -> Result<()> {
        let table = self.table(table)?;
        let schema = table.schema();
        let searched = searched_attributes(profile);
        let records = self.sample_records(&table, &searched)?;
        let objects = table.count(&Predicate::All, ReadOptions::default())?.0;
        fill_search_rows(&records, objects, &schema, &searched, profile, page_rows);
        Ok(())
    }

    /// Up to [`SAMPLE_RECORDS`] records of `table` with the attributes `attributes`,
    /// evenly spaced in key order over its first [`SAMPLED_FROM_RECORDS`] (only those
    /// attributes read). The first records in key order alone are no sample: keys often
    /// start with what groups them (a city), and the shares of values among them are
    /// not the table's (the listings' first 4,096 keys were nearly all one city's).
    fn sample_records(&self, table: &Table, attributes: &AttributeSet) -> Result<Vec<Record>> {
        if attributes.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<u16> = attributes.iter().copied().collect();
        let request = ReadRequest::Search {
            query: Query {
                predicate: Predicate::All,
                projection: Some(names(&ids, &table.schema())),
                limit: Some(SAMPLED_FROM_RECORDS),
                read: ReadOptions::default(),
            },
        };
        // Where the table is held (elsewhere on a node without its data), and not
        // profiled: the sample is not a search served.
        match self.read_one(table, &request, crate::Wait::Allowed)? {
            Some(crate::message::ReadAnswer::Rows(result)) => {
                let step = result.rows.len().div_ceil(SAMPLE_RECORDS).max(1);
                Ok(result.rows.into_iter().step_by(step).collect())
            }
            other => Err(QueryError::Store(puffer_store::StoreError::Unavailable(
                format!("a sample of {} answered {other:?}", table.name()),
            ))),
        }
    }

    /// Keeps the sampled values of the numeric attributes `numeric` of `table`, sorted
    /// (for the widths of ranges).
    fn set_numbers(&self, table: &Table, numeric: &AttributeSet, records: &[Record]) -> Result<()> {
        let schema = table.schema();
        let mut numbers: HashMap<u16, Vec<f64>> = HashMap::new();
        for &id in numeric {
            let name = &schema.attributes[usize::from(id)].name;
            let mut values: Vec<f64> = records
                .iter()
                .filter_map(|r| match r.values.get(name)? {
                    puffer_store::Value::Int(i) | puffer_store::Value::Timestamp(i) => {
                        Some(*i as f64)
                    }
                    puffer_store::Value::Float(x) => Some(*x),
                    _ => None,
                })
                .collect();
            values.sort_unstable_by(f64::total_cmp);
            numbers.insert(id, values);
        }
        self.tuning
            .with_table(table.uid(), |tuning, _| tuning.numbers = numbers)
    }
}

/// The numeric attributes of `schema` (ints, floats, timestamps).
fn numeric_attributes(schema: &puffer_store::Schema) -> AttributeSet {
    (0u16..)
        .zip(&schema.attributes)
        .filter(|(_, a)| {
            matches!(
                a.attr_type,
                AttrType::Int | AttrType::Float | AttrType::Timestamp
            )
        })
        .map(|(id, _)| id)
        .collect()
}

/// The attributes the searches of `profile` constrain.
fn searched_attributes(profile: &WorkloadProfile) -> AttributeSet {
    profile
        .searches
        .iter()
        .flat_map(|search| search.shape.attributes.keys().copied())
        .collect()
}

/// Gives every search of `profile` the rows it finds in `records` (a sample of a
/// table of `table_records`, holding at least the attributes `searched`), asking for
/// the page `page_rows` gives it, and the profile how the searched attributes' values
/// spread (the regions updates write).
fn fill_search_rows(
    records: &[Record],
    table_records: u64,
    schema: &puffer_store::Schema,
    searched: &AttributeSet,
    profile: &mut WorkloadProfile,
    page_rows: &dyn Fn(&SearchShape) -> Option<u64>,
) {
    if profile.searches.is_empty() {
        return;
    }
    let sample = RowSample::new(records, table_records, schema, searched);
    for search in &mut profile.searches {
        search.rows = Some(sample.search_rows(&search.shape, page_rows(&search.shape)));
    }
    profile.value_spreads = sample.value_spreads();
}

fn sorted(names: &[String]) -> Vec<&str> {
    let mut sorted: Vec<&str> = names.iter().map(String::as_str).collect();
    sorted.sort_unstable();
    sorted
}
