//! The data and the queries of the BlowFish experiments: a table loaded into a shard and
//! compacted into segments, copied once per replica (replicas are separate copies), and
//! equality searches whose terms follow a Zipf distribution, each returning 1 to 1000
//! keys as in the paper's workload. Every term's expected answer is known from the
//! parsed rows, and answers are checked as the experiments run.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{ensure, Context};
use puffer_query::import::{read_table, KeySource};
use puffer_store::shard::{Query, ReadOptions};
use puffer_store::{Predicate, Schema, Shard, ShardOptions, Value};
use rand::distributions::{Distribution, WeightedIndex};
use rand::seq::SliceRandom;
use rand::SeedableRng;

/// Most keys one query returns (the paper's output cardinality is 1 to 1000).
pub const MAX_MATCHES: usize = 1000;

/// One search term: `attribute = value`, with the number of records it matches.
#[derive(Clone, Debug)]
pub struct Term {
    pub attribute: String,
    pub value: Value,
    pub matches: u64,
}

impl Term {
    pub fn query(&self) -> Query {
        Query {
            predicate: Predicate::Eq(self.attribute.clone(), self.value.clone()),
            projection: Some(Vec::new()),
            limit: None,
            read: ReadOptions::default(),
        }
    }
}

/// The loaded table: one shard directory, its schema, and the terms.
pub struct Workload {
    pub shard_dir: PathBuf,
    pub schema: Schema,
    pub terms: Vec<Term>,
    pub rows: usize,
    pub input_bytes: u64,
}

/// Shards of the experiments read every record from the compressed index: a cache of
/// hot records would hide what the sample layers buy, which is what is measured.
fn replica_options() -> ShardOptions {
    ShardOptions {
        record_cache_bytes: 0,
        ..ShardOptions::default()
    }
}

/// Reads `input`, loads it into a shard under `work_dir/source` and compacts it.
pub fn prepare(input: &Path, work_dir: &Path, seed: u64) -> anyhow::Result<Workload> {
    let table = read_table(&[input.to_path_buf()], KeySource::RowNumber)
        .map_err(|e| anyhow::anyhow!("reading {}: {}", input.display(), e.message()))?;
    ensure!(!table.is_empty(), "{} has no rows", input.display());
    let shard_dir = work_dir.join("source");
    let shard = Shard::open(&shard_dir, table.schema.clone(), replica_options())
        .with_context(|| format!("opening {}", shard_dir.display()))?;
    for chunk in (0..table.len()).collect::<Vec<_>>().chunks(2000) {
        let ops = chunk
            .iter()
            .map(|&row| puffer_store::shard::WriteOp::Put(table.record(row)))
            .collect();
        shard.write(ops)?;
    }
    shard.compact_all()?;
    shard.close();

    // Terms: every (attribute, value) pair of string and int attributes matching 1..=1000 rows.
    let mut counts: HashMap<(usize, String), (Value, u64)> = HashMap::new();
    for row in &table.rows {
        for (id, value) in row.values.iter().enumerate() {
            let Some(value) = value else { continue };
            if !matches!(value, Value::String(_) | Value::Int(_)) {
                continue;
            }
            let entry = counts
                .entry((id, format!("{value:?}")))
                .or_insert_with(|| (value.clone(), 0));
            entry.1 += 1;
        }
    }
    let mut terms: Vec<Term> = counts
        .into_iter()
        .filter(|(_, (_, n))| (1..=MAX_MATCHES as u64).contains(n))
        .map(|((id, _), (value, matches))| Term {
            attribute: table.schema.attributes[id].name.clone(),
            value,
            matches,
        })
        .collect();
    ensure!(
        terms.len() >= 10,
        "{} has too few attribute values matching 1..=1000 rows",
        input.display()
    );
    // Popularity rank independent of result size: a fixed shuffle.
    terms.sort_by(|a, b| {
        (a.attribute.as_str(), format!("{:?}", a.value))
            .cmp(&(b.attribute.as_str(), format!("{:?}", b.value)))
    });
    terms.shuffle(&mut rand::rngs::StdRng::seed_from_u64(seed));
    terms.truncate(20_000);
    Ok(Workload {
        shard_dir,
        schema: table.schema.clone(),
        terms,
        rows: table.len(),
        input_bytes: table.input_bytes,
    })
}

impl Workload {
    /// Opens a separate copy of the shard in `dir` (copied from the source directory).
    pub fn open_copy(&self, dir: &Path) -> anyhow::Result<Shard> {
        copy_dir(&self.shard_dir, dir)?;
        Ok(Shard::open(dir, self.schema.clone(), replica_options())?)
    }

    /// A sampler of term indexes with Zipf popularity (skew `skew`).
    pub fn zipf(&self, skew: f64) -> WeightedIndex<f64> {
        let weights: Vec<f64> = (1..=self.terms.len())
            .map(|rank| 1.0 / (rank as f64).powf(skew))
            .collect();
        WeightedIndex::new(weights).expect("positive weights")
    }
}

/// Runs term `term` on `shard` and checks the number of keys returned.
pub fn run_query(shard: &Shard, term: &Term) -> Result<(), String> {
    match shard.search(&term.query()) {
        Ok(result) if result.rows.len() as u64 == term.matches => Ok(()),
        Ok(result) => Err(format!(
            "{} = {:?}: expected {} keys, got {}",
            term.attribute,
            term.value,
            term.matches,
            result.rows.len()
        )),
        Err(e) => Err(format!("{} = {:?}: {e}", term.attribute, term.value)),
    }
}

/// Draws term indexes.
pub struct TermSampler {
    pub zipf: WeightedIndex<f64>,
    pub rng: rand::rngs::StdRng,
}

impl TermSampler {
    pub fn new(workload: &Workload, skew: f64, seed: u64) -> TermSampler {
        TermSampler {
            zipf: workload.zipf(skew),
            rng: rand::rngs::StdRng::seed_from_u64(seed),
        }
    }

    pub fn next(&mut self) -> usize {
        self.zipf.sample(&mut self.rng)
    }
}

fn copy_dir(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    for entry in std::fs::read_dir(from).with_context(|| format!("listing {}", from.display()))? {
        let entry = entry?;
        let name = entry.file_name();
        if name == "LOCK" {
            continue;
        }
        let path = entry.path();
        if path.is_dir() {
            copy_dir(&path, &to.join(&name))?;
        } else {
            std::fs::copy(&path, to.join(&name))
                .with_context(|| format!("copying {}", path.display()))?;
        }
    }
    Ok(())
}

/// Terms shared by the load generator threads.
pub type SharedTerms = Arc<Vec<Term>>;
