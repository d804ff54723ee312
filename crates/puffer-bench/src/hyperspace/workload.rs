//! The paper's workloads (Table 1) on the listings, and a closed-loop driver.
//!
//! Updates are common to all workloads: half change `price`, half `ratings`, each a
//! fetch by key and a put of the changed record (the model's update), the new value
//! another listing's of the same neighbourhood ([`Listings`]). Searches fix each
//! attribute of their class by equality, with the values a listing that has them all
//! holds now (so every search finds at least that listing, as a booking site's would),
//! and ask for a page of [`PAGE_ROWS`] results, as a booking site shows: an answer of
//! thousands of rows costs its extraction, whatever the configuration, which is not
//! what the experiment is about.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use puffer_adapt::hyperspace::{
    AttributeSet, SearchFrequency, SearchShape, UpdateFrequency, WorkloadProfile,
};
use puffer_node::{Database, ReadAnswer, ReadRequest, Wait};
use puffer_store::{Predicate, Query, ReadOptions, Value, WriteOp};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::data::id;
use super::listings::{updated_index_of, Listings};

/// Rows a search asks for.
pub const PAGE_ROWS: usize = 100;

/// The table the experiment uses.
pub const TABLE: &str = "listings";

/// One of Table 1's workloads: search classes (attributes, weight among searches).
#[derive(Clone, Debug)]
pub struct Workload {
    pub name: &'static str,
    pub searches: Vec<(Vec<&'static str>, f64)>,
}

/// Workloads A, B and C of the paper's Table 1.
pub fn workloads() -> Vec<Workload> {
    let a = vec![
        (vec!["locality"], 6.0),
        (vec!["region", "price"], 13.0),
        (vec!["locality", "ratings", "price"], 26.0),
        (vec!["locality", "price", "pets", "pool"], 55.0),
    ];
    let b = vec![
        (vec!["locality"], 55.0),
        (vec!["region", "price"], 26.0),
        (vec!["locality", "ratings", "price"], 13.0),
        (vec!["locality", "price", "pets", "pool"], 6.0),
    ];
    let c = vec![
        (vec!["locality", "price"], 20.0),
        (vec!["locality", "ratings"], 20.0),
        (vec!["locality", "price", "ratings"], 20.0),
        (vec!["postcode", "price"], 10.0),
        (vec!["postcode", "ratings"], 10.0),
        (vec!["postcode", "price", "ratings"], 10.0),
        (vec!["locality", "stars", "ratings"], 2.0),
        (vec!["locality", "stars", "price"], 2.0),
        (vec!["locality", "price", "category"], 1.0),
        (vec!["locality", "ratings", "category"], 1.0),
        (vec!["postcode", "stars", "ratings"], 1.0),
        (vec!["postcode", "stars", "price"], 1.0),
        (vec!["region", "price"], 1.0),
        (vec!["region", "ratings"], 1.0),
    ];
    vec![
        Workload {
            name: "A",
            searches: a,
        },
        Workload {
            name: "B",
            searches: b,
        },
        Workload {
            name: "C",
            searches: c,
        },
    ]
}

/// A workload's variant: the share of searches among operations (0.9 read-heavy, 0.5
/// balanced, 0.1 write-heavy).
#[derive(Clone, Copy, Debug)]
pub struct Mix {
    pub name: &'static str,
    pub search_share: f64,
}

pub const MIXES: [Mix; 3] = [
    Mix {
        name: "RH",
        search_share: 0.9,
    },
    Mix {
        name: "BAL",
        search_share: 0.5,
    },
    Mix {
        name: "WH",
        search_share: 0.1,
    },
];

/// The attributes updates change, each half of them.
pub const UPDATED: [&str; 2] = ["price", "ratings"];

/// The workload's profile in the model's terms (frequencies as shares of all
/// operations).
pub fn profile(workload: &Workload, mix: Mix) -> WorkloadProfile {
    let total: f64 = workload.searches.iter().map(|(_, w)| w).sum();
    WorkloadProfile {
        searches: workload
            .searches
            .iter()
            .map(|(attributes, weight)| SearchFrequency {
                shape: SearchShape::equalities(attributes.iter().map(|a| id(a))),
                frequency: mix.search_share * weight / total,
                rows: None,
            })
            .collect(),
        updates: UPDATED
            .iter()
            .map(|a| UpdateFrequency {
                attributes: AttributeSet::from([id(a)]),
                frequency: (1.0 - mix.search_share) / UPDATED.len() as f64,
            })
            .collect(),
        // The rows' spreads come with the searches' rows (`Bench::with_rows`).
        value_spreads: Default::default(),
    }
}

/// The listings (indexes below `count`) that have every one of `attributes`, as `has`
/// tells: those a search of the class takes its values from.
pub fn listings_with(
    count: usize,
    attributes: &[&str],
    has: impl Fn(usize, &str) -> bool,
) -> anyhow::Result<Vec<usize>> {
    let having: Vec<usize> = (0..count)
        .filter(|&i| attributes.iter().all(|a| has(i, a)))
        .collect();
    if having.is_empty() {
        bail!("no listing has all of {attributes:?}");
    }
    Ok(having)
}

/// What one client does: searches by class, updates, from a seed.
pub struct Operations {
    listings: Arc<Listings>,
    /// Per search class: its attributes, its cumulative weight, and the listings that
    /// have all of them.
    classes: Vec<(Vec<&'static str>, f64, Vec<usize>)>,
    search_share: f64,
    /// The attributes updates change, each equally often, with their positions in
    /// [`UPDATED`].
    updated: Vec<(&'static str, usize)>,
}

impl Operations {
    /// `workload` at `mix`, updates changing the attributes of `updated` (the
    /// experiment's [`UPDATED`]; calibration runs change one).
    pub fn new(
        listings: Arc<Listings>,
        workload: &Workload,
        mix: Mix,
        updated: &[&'static str],
    ) -> anyhow::Result<Self> {
        let total: f64 = workload.searches.iter().map(|(_, w)| w).sum();
        let mut cumulative = 0.0;
        let mut classes = Vec::new();
        // Which listings hold an updated attribute does not change: every donor holds
        // it (see [`Listings`]).
        for (attributes, weight) in &workload.searches {
            cumulative += weight / total;
            let having = listings_with(listings.len(), attributes, |i, a| {
                listings.value(i, a).is_some()
            })?;
            classes.push((attributes.clone(), cumulative, having));
        }
        let updated = updated
            .iter()
            .map(|&a| Ok((a, updated_index_of(a)?)))
            .collect::<anyhow::Result<_>>()?;
        Ok(Operations {
            listings,
            classes,
            search_share: mix.search_share,
            updated,
        })
    }

    /// Operation kinds: each search class in the workload's order, then the update.
    pub fn kinds(&self) -> usize {
        self.classes.len() + 1
    }

    /// Runs one operation; its kind (a search class's index, or [`Operations::kinds`]
    /// − 1 for an update).
    pub fn run_one(&self, db: &Database, rng: &mut StdRng) -> anyhow::Result<usize> {
        if rng.gen_bool(self.search_share) {
            let pick = rng.gen::<f64>();
            let class = self
                .classes
                .iter()
                .position(|(_, cumulative, _)| pick < *cumulative)
                .unwrap_or(self.classes.len() - 1);
            let having = &self.classes[class].2;
            let listing = having[rng.gen_range(0..having.len())];
            search(db, self.predicate(class, listing)?)?;
            Ok(class)
        } else {
            let (attribute, k) = self.updated[rng.gen_range(0..self.updated.len())];
            let listing = rng.gen_range(0..self.listings.len());
            let (donor, value) = self.listings.donor(listing, k, rng);
            update(db, self.listings.key(listing), attribute, value)?;
            self.listings.set_holder(listing, k, donor);
            Ok(self.classes.len())
        }
    }

    /// A search of class `class` for the values listing `listing` holds now.
    fn predicate(&self, class: usize, listing: usize) -> anyhow::Result<Predicate> {
        let mut conditions = Vec::new();
        for a in &self.classes[class].0 {
            let Some(value) = self.listings.value(listing, a) else {
                bail!("listing {listing} has no {a} any more");
            };
            conditions.push(Predicate::Eq((*a).into(), value.clone()));
        }
        Ok(Predicate::And(conditions))
    }

    /// Whether `kind` (from [`Operations::run_one`]) is a search.
    pub fn is_search(&self, kind: usize) -> bool {
        kind < self.classes.len()
    }
}

fn search(db: &Database, predicate: Predicate) -> anyhow::Result<()> {
    let request = ReadRequest::Search {
        query: Query {
            predicate,
            projection: None,
            limit: Some(PAGE_ROWS),
            read: ReadOptions::default(),
        },
    };
    match db.read(TABLE, &request, Wait::Allowed)? {
        Some(ReadAnswer::Rows(_)) => Ok(()),
        other => bail!("a search answered {other:?}"),
    }
}

/// Fetches `key`'s record and puts it back with `attribute` set to `value`.
fn update(db: &Database, key: &[u8], attribute: &str, value: &Value) -> anyhow::Result<()> {
    let request = ReadRequest::Get {
        key: key.to_vec(),
        read: ReadOptions::default(),
    };
    let Some(ReadAnswer::Record {
        record: Some(mut record),
        ..
    }) = db.read(TABLE, &request, Wait::Allowed)?
    else {
        bail!("listing {:?} is gone", String::from_utf8_lossy(key));
    };
    record.values.insert(attribute.into(), value.clone());
    write_retrying(db, vec![WriteOp::Put(record)])
}

/// Writes refused as overloaded since the process started (each retried after a
/// pause): a run that refuses many measures the store's backlog, not its updates.
pub static REFUSED_WRITES: AtomicU64 = AtomicU64::new(0);

/// Writes one batch, again (a bounded number of times) while the store refuses it as
/// overloaded: compaction behind is the store's to say, and the client's to wait out.
pub fn write_retrying(db: &Database, ops: Vec<WriteOp>) -> anyhow::Result<()> {
    for _ in 0..10_000 {
        match db.write_batch(vec![(TABLE.into(), ops.clone())]) {
            Ok(_) => return Ok(()),
            Err(puffer_query::QueryError::Store(puffer_store::StoreError::Overloaded(_))) => {
                REFUSED_WRITES.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err(e).context("a write"),
        }
    }
    bail!("the store stayed overloaded for 20 s")
}

/// What the clients' operations of one kind (see [`Operations::run_one`]) took in the
/// measured seconds of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct KindTime {
    /// Operations of the kind started in the measured seconds and finished.
    pub operations: u64,
    /// Their summed latency, seconds.
    pub latency_s: f64,
    /// The CPU seconds their clients' threads spent on them (see
    /// [`super::cpu::this_thread_s`]).
    pub cpu_s: f64,
}

impl KindTime {
    /// The kind's mean latency, seconds (0 without operations).
    pub fn mean_latency_s(&self) -> f64 {
        self.latency_s / self.operations.max(1) as f64
    }

    /// The CPU seconds one operation of the kind took on its client's thread (0
    /// without operations).
    pub fn mean_cpu_s(&self) -> f64 {
        self.cpu_s / self.operations.max(1) as f64
    }
}

/// Closed-loop clients running `operations` for `seconds` (rounded up to whole seconds,
/// at least 1) after `warm_seconds`: the median of the operations completed in each
/// measured second, and what each kind of operation took in the measured seconds. The
/// median, not the mean: on a shared machine a second in which another tenant took the
/// cores says nothing about the configuration, and one such second moved a 3 s mean by
/// up to half.
pub fn measure_kinds(
    db: &Arc<Database>,
    operations: &Arc<Operations>,
    clients: usize,
    warm_seconds: f64,
    seconds: f64,
    seed: u64,
) -> anyhow::Result<KindRun> {
    let measured_seconds = seconds.ceil().max(1.0);
    let warm_seconds = warm_seconds.ceil().max(0.0);
    let series = run_series_timed(
        db,
        operations,
        clients,
        warm_seconds + measured_seconds,
        seed,
        None,
        warm_seconds,
    )?;
    let per_second = series.per_second[warm_seconds as usize..].to_vec();
    Ok(KindRun {
        ops_per_s: median_count(&per_second),
        per_second,
        kinds: series.kinds,
    })
}

/// What [`measure_kinds`] measured.
pub struct KindRun {
    /// The median second's operations.
    pub ops_per_s: f64,
    /// The operations of each second measured (after the warm-up).
    pub per_second: Vec<u64>,
    /// What each kind of operation took.
    pub kinds: Vec<KindTime>,
}

/// Each kind's share of the machine's time in a closed loop whose clients share the
/// cores, in seconds of one operation of that kind: its mean latency scaled so that the
/// kinds' costs, weighted by how often each ran, add up to `1 / throughput`. With every
/// client waiting its turn on the same cores, an operation's latency is its own work
/// times the same queueing factor for all, which the scaling takes out: what is left
/// compares, kind by kind, with the model's cost of each.
pub fn kind_costs_s(kinds: &[KindTime], throughput_ops_per_s: f64) -> Vec<f64> {
    let operations: u64 = kinds.iter().map(|k| k.operations).sum();
    let latency_s: f64 = kinds.iter().map(|k| k.latency_s).sum();
    if operations == 0 || latency_s <= 0.0 || throughput_ops_per_s <= 0.0 {
        return vec![0.0; kinds.len()];
    }
    // Σ share_k · L_k = latency_s / operations, to be 1 / throughput.
    let scale = operations as f64 / (latency_s * throughput_ops_per_s);
    kinds.iter().map(|k| k.mean_latency_s() * scale).collect()
}

/// The median of `counts` (the mean of the middle two for an even count; 0 for none).
pub fn median_count(counts: &[u64]) -> f64 {
    median(&mut counts.iter().map(|&count| count as f64).collect::<Vec<_>>())
}

/// The median of `values` (the mean of the middle two for an even count; 0 for none).
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// Runs clients for `seconds`: the operations completed in each second of the run.
/// `switch` (at seconds, new operations) changes the workload while running.
pub fn run_series(
    db: &Arc<Database>,
    operations: &Arc<Operations>,
    clients: usize,
    seconds: f64,
    seed: u64,
    switch: Option<(f64, Arc<Operations>)>,
) -> anyhow::Result<Vec<u64>> {
    Ok(run_series_timed(db, operations, clients, seconds, seed, switch, seconds)?.per_second)
}

/// A run's operations per second, and what each kind took from `timed_from` on.
struct Series {
    pub per_second: Vec<u64>,
    /// Per kind of the first operations (see [`Operations::run_one`]).
    pub kinds: Vec<KindTime>,
}

/// [`run_series`], timing each operation started from `timed_from` seconds on, by kind.
fn run_series_timed(
    db: &Arc<Database>,
    operations: &Arc<Operations>,
    clients: usize,
    seconds: f64,
    seed: u64,
    switch: Option<(f64, Arc<Operations>)>,
    timed_from: f64,
) -> anyhow::Result<Series> {
    let kinds = operations.kinds();
    let stop = Arc::new(AtomicBool::new(false));
    let current = Arc::new(std::sync::RwLock::new(operations.clone()));
    let buckets: Arc<Vec<AtomicU64>> = Arc::new(
        (0..(seconds.ceil() as usize + 2))
            .map(|_| AtomicU64::new(0))
            .collect(),
    );
    let start = Instant::now();
    let handles: Vec<_> = (0..clients)
        .map(|c| {
            let (db, stop, current, buckets) =
                (db.clone(), stop.clone(), current.clone(), buckets.clone());
            std::thread::spawn(move || -> anyhow::Result<Vec<KindTime>> {
                let mut rng = StdRng::seed_from_u64(seed * 1000 + c as u64);
                let mut times = vec![KindTime::default(); kinds];
                while !stop.load(Ordering::Relaxed) {
                    let operations = current.read().expect("workload lock").clone();
                    let began = start.elapsed();
                    // Only while the first operations run: a switched workload's kinds
                    // are another workload's. The thread's clock is read only then.
                    let timed = began.as_secs_f64() >= timed_from;
                    let cpu_began = if timed {
                        super::cpu::this_thread_s()
                    } else {
                        0.0
                    };
                    let kind = operations.run_one(&db, &mut rng)?;
                    let ended = start.elapsed();
                    if timed && kind < times.len() {
                        times[kind].operations += 1;
                        times[kind].latency_s += (ended - began).as_secs_f64();
                        times[kind].cpu_s += super::cpu::this_thread_s() - cpu_began;
                    }
                    if let Some(bucket) = buckets.get(ended.as_secs() as usize) {
                        bucket.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Ok(times)
            })
        })
        .collect();
    if let Some((at, next)) = switch {
        std::thread::sleep(Duration::from_secs_f64(at));
        *current.write().expect("workload lock") = next;
        std::thread::sleep(Duration::from_secs_f64((seconds - at).max(0.0)));
    } else {
        std::thread::sleep(Duration::from_secs_f64(seconds));
    }
    stop.store(true, Ordering::Relaxed);
    let mut times = vec![KindTime::default(); kinds];
    for handle in handles {
        let client = handle
            .join()
            .map_err(|_| anyhow::anyhow!("a client panicked"))??;
        for (total, one) in times.iter_mut().zip(client) {
            total.operations += one.operations;
            total.latency_s += one.latency_s;
            total.cpu_s += one.cpu_s;
        }
    }
    Ok(Series {
        per_second: buckets
            .iter()
            .take(seconds.ceil() as usize)
            .map(|b| b.load(Ordering::Relaxed))
            .collect(),
        kinds: times,
    })
}

/// Kendall's tau-a of two rankings given as values (pairs tied in either count as
/// neither concordant nor discordant).
pub fn kendall_tau(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len().min(b.len());
    if n < 2 {
        return 1.0;
    }
    let mut score = 0i64;
    for i in 0..n {
        for j in i + 1..n {
            let product = (a[i] - a[j]) * (b[i] - b[j]);
            score += if product > 0.0 {
                1
            } else if product < 0.0 {
                -1
            } else {
                0
            };
        }
    }
    score as f64 / (n * (n - 1) / 2) as f64
}

/// A configuration as the experiment names it: its subspaces' attributes.
pub fn label(subspaces: &[(Vec<String>, u32)]) -> String {
    if subspaces.is_empty() {
        return "key only".into();
    }
    subspaces
        .iter()
        .map(|(attributes, _)| format!("({})", attributes.join(",")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The subspaces [`label`] shows, each with `regions` regions: the inverse of
/// [`label`] (which does not show regions).
pub fn parse_label(shown: &str, regions: u32) -> anyhow::Result<Vec<(Vec<String>, u32)>> {
    if shown == "key only" {
        return Ok(Vec::new());
    }
    shown
        .split(' ')
        .map(|subspace| {
            let inner = subspace
                .strip_prefix('(')
                .and_then(|s| s.strip_suffix(')'))
                .with_context(|| format!("{subspace:?} is not a subspace in parentheses"))?;
            let attributes: Vec<String> = inner.split(',').map(str::to_string).collect();
            if attributes.iter().any(|a| a.is_empty()) {
                bail!("{subspace:?} names an empty attribute");
            }
            Ok((attributes, regions))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use puffer_store::Record;

    #[test]
    fn labels_parse_back_into_their_subspaces() {
        for subspaces in [
            Vec::new(),
            vec![(vec!["locality".to_string()], 16)],
            vec![
                (vec!["locality".to_string(), "price".to_string()], 16),
                (vec!["postcode".to_string()], 16),
            ],
        ] {
            assert_eq!(parse_label(&label(&subspaces), 16).unwrap(), subspaces);
        }
        for bad in ["", "(locality", "locality", "(locality,)", "(a) ()"] {
            assert!(parse_label(bad, 16).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn kind_costs_scale_latencies_to_the_throughput() {
        // Two kinds, three quarters of one at 1 ms, a quarter of the other at 3 ms, at
        // 500 ops/s: 2 ms an operation of the machine's time, so the queueing factor
        // is 2 ms / 1.5 ms and the costs 1.33 and 4 ms.
        let kinds = [
            KindTime {
                operations: 300,
                latency_s: 0.3,
                cpu_s: 0.1,
            },
            KindTime {
                operations: 100,
                latency_s: 0.3,
                cpu_s: 0.1,
            },
        ];
        let costs = kind_costs_s(&kinds, 500.0);
        assert!((costs[0] - 0.002 / 1.5).abs() < 1e-12, "{costs:?}");
        assert!((costs[1] - 0.004).abs() < 1e-12, "{costs:?}");
        let weighted = 0.75 * costs[0] + 0.25 * costs[1];
        assert!((weighted - 1.0 / 500.0).abs() < 1e-12);
        assert_eq!(kind_costs_s(&kinds, 0.0), vec![0.0, 0.0]);
        assert_eq!(kind_costs_s(&[KindTime::default()], 100.0), vec![0.0]);
    }

    #[test]
    fn kendall_tau_counts_concordant_and_discordant_pairs() {
        assert_eq!(kendall_tau(&[1.0, 2.0, 3.0], &[10.0, 20.0, 30.0]), 1.0);
        assert_eq!(kendall_tau(&[1.0, 2.0, 3.0], &[30.0, 20.0, 10.0]), -1.0);
        // Pairs (1,2) concordant, (1,3) concordant, (2,3) discordant: 1/3.
        assert!((kendall_tau(&[1.0, 2.0, 3.0], &[1.0, 3.0, 2.0]) - 1.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn the_median_second_is_the_middle_count() {
        assert_eq!(median_count(&[]), 0.0);
        assert_eq!(median_count(&[7]), 7.0);
        assert_eq!(median_count(&[9, 1, 5]), 5.0);
        // One stalled second moves a mean, not the median.
        assert_eq!(median_count(&[100, 2, 104, 98, 101]), 100.0);
        assert_eq!(median_count(&[4, 1, 3, 2]), 2.5);
    }

    #[test]
    fn the_median_of_rounds_is_the_middle_value() {
        assert_eq!(median(&mut []), 0.0);
        assert_eq!(median(&mut [3.5]), 3.5);
        assert_eq!(median(&mut [4_000.0, 2_500.0, 3_700.0]), 3_700.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
    }

    /// Listings in three places, some without a rating, a place without prices.
    fn small_listings() -> Vec<Record> {
        let mut records = Vec::new();
        for i in 0..60u32 {
            let mut record = Record::new(format!("l{i:02}"));
            let place = ["north", "south", "moon"][(i % 3) as usize];
            record.values.insert("locality".into(), Value::str(place));
            record.values.insert("region".into(), Value::str("city"));
            if place != "moon" {
                let base = if place == "north" { 100.0 } else { 900.0 };
                record
                    .values
                    .insert("price".into(), Value::Float(base + f64::from(i % 7)));
            }
            if i % 4 != 0 {
                record
                    .values
                    .insert("ratings".into(), Value::Float(f64::from(i % 5)));
            }
            records.push(record);
        }
        records
    }

    /// Updates and searches on a real database: afterwards the table holds exactly
    /// what the listings say it holds now, and every search of every class finds the
    /// listing it was drawn from.
    #[test]
    fn the_table_holds_what_the_listings_say_and_searches_find_their_listing() {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::open(dir.path(), Default::default()).unwrap();
        db.create_table_with(
            TABLE,
            super::super::data::schema(),
            puffer_node::TableLayout {
                shards: 2,
                replicas: 1,
            },
        )
        .unwrap();
        let listings = Arc::new(Listings::draw(small_listings(), 5).unwrap());
        let loaded = listings.records();
        write_retrying(&db, loaded.iter().cloned().map(WriteOp::Put).collect()).unwrap();
        let workload = Workload {
            name: "T",
            searches: vec![(vec!["locality", "price"], 1.0), (vec!["ratings"], 1.0)],
        };
        let mix = Mix {
            name: "BAL",
            search_share: 0.5,
        };
        let operations = Operations::new(listings.clone(), &workload, mix, &UPDATED).unwrap();
        let mut rng = StdRng::seed_from_u64(9);
        let mut updates = 0;
        for _ in 0..400 {
            if !operations.is_search(operations.run_one(&db, &mut rng).unwrap()) {
                updates += 1;
            }
        }
        assert!(updates > 100, "{updates} updates");
        let now = listings.records();
        assert_ne!(now, loaded, "no update changed a value");
        for (i, expected) in now.iter().enumerate() {
            let request = ReadRequest::Get {
                key: expected.key.clone(),
                read: ReadOptions::default(),
            };
            match db.read(TABLE, &request, Wait::Allowed).unwrap() {
                Some(ReadAnswer::Record {
                    record: Some(stored),
                    ..
                }) => assert_eq!(&stored, expected, "listing {i}"),
                other => panic!("listing {i}: {other:?}"),
            }
        }
        for class in 0..workload.searches.len() {
            for &listing in &operations.classes[class].2 {
                let query = Query {
                    predicate: operations.predicate(class, listing).unwrap(),
                    projection: None,
                    limit: None,
                    read: ReadOptions::default(),
                };
                let request = ReadRequest::Search { query };
                let Some(ReadAnswer::Rows(result)) =
                    db.read(TABLE, &request, Wait::Allowed).unwrap()
                else {
                    panic!("class {class}: not rows");
                };
                assert!(
                    result.rows.iter().any(|r| r.key == now[listing].key),
                    "class {class}: listing {listing} not found"
                );
            }
        }
    }

    #[test]
    fn profiles_give_each_class_its_share_of_all_operations() {
        for workload in workloads() {
            for mix in MIXES {
                let profile = profile(&workload, mix);
                let searches: f64 = profile.searches.iter().map(|s| s.frequency).sum();
                let updates: f64 = profile.updates.iter().map(|u| u.frequency).sum();
                assert!((searches - mix.search_share).abs() < 1e-9);
                assert!((searches + updates - 1.0).abs() < 1e-9);
            }
        }
    }
}
