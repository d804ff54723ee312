//! `puffer-bench columns` (issue 20, item 3): answers of thousands of rows that ask for a
//! few columns read only those fields.
//!
//! A table (default: the Inside Airbnb listings) is loaded into one shard and compacted,
//! and the attribute layer of the queried attribute is built, so that finding the rows
//! costs little and reading them is what is measured. Equality searches on `--attribute`
//! (values drawn from those present, every matching row) run in three forms, in
//! alternation: keys only, the `--columns` asked, and whole records. Every answer is
//! checked against the parsed rows (keys, and the asked columns' values).

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use puffer_query::import::{read_table, KeySource};
use puffer_store::{Predicate, Query, ReadOptions, Shard, ShardOptions, Value};
use rand::{Rng, SeedableRng};
use serde_json::json;

use crate::stats::{dataset_label, quantile_us, round};

#[derive(clap::Args)]
pub struct ColumnsArgs {
    /// CSV / JSON-lines inputs (gzip allowed), read as one table.
    #[arg(long, num_args = 1.., default_values = ["../shared/data/airbnb/antwerp-listings.csv.gz", "../shared/data/airbnb/boston-listings.csv.gz", "../shared/data/airbnb/dublin-listings.csv.gz", "../shared/data/airbnb/edinburgh-listings.csv.gz", "../shared/data/airbnb/hongkong-listings.csv.gz"])]
    input: Vec<PathBuf>,
    /// The column holding each record's key.
    #[arg(long, default_value = "id")]
    key: String,
    /// The attribute the equality searches test.
    #[arg(long, default_value = "room_type")]
    attribute: String,
    /// The columns asked in the projected form.
    #[arg(long, value_delimiter = ',', default_values = ["price", "room_type"])]
    columns: Vec<String>,
    /// Rounds; each runs one search in every form.
    #[arg(long, default_value_t = 40)]
    rounds: usize,
    /// Random seed of the values asked.
    #[arg(long, default_value_t = 3)]
    seed: u64,
}

pub fn run(args: &ColumnsArgs) -> anyhow::Result<()> {
    ensure!(args.rounds >= 1, "--rounds must be at least 1");
    for path in &args.input {
        ensure!(path.is_file(), "input {} is not a file", path.display());
    }
    let table = read_table(&args.input, KeySource::Column(args.key.clone()))
        .map_err(|e| anyhow::anyhow!("reading the input: {}", e.message()))?;
    let id_of = |name: &str| -> anyhow::Result<usize> {
        table
            .schema
            .attributes
            .iter()
            .position(|a| a.name == name)
            .with_context(|| format!("no attribute {name:?}"))
    };
    let attribute = id_of(&args.attribute)?;
    let columns: Vec<usize> = args
        .columns
        .iter()
        .map(|c| id_of(c))
        .collect::<anyhow::Result<_>>()?;
    // The oracle: the rows of each value of the attribute, by key.
    let mut rows_of: HashMap<String, (Value, Vec<usize>)> = HashMap::new();
    for (row, values) in table.rows.iter().enumerate() {
        if let Some(value) = &values.values[attribute] {
            rows_of
                .entry(format!("{value:?}"))
                .or_insert_with(|| (value.clone(), Vec::new()))
                .1
                .push(row);
        }
    }
    let mut values: Vec<(Value, Vec<usize>)> = rows_of.into_values().collect();
    values.sort_by_key(|(v, _)| format!("{v:?}"));
    ensure!(!values.is_empty(), "{:?} has no values", args.attribute);

    let dir = tempfile::Builder::new()
        .prefix("puffer-bench-columns-")
        .tempdir()?;
    let shard = Shard::open(
        dir.path(),
        table.schema.clone(),
        ShardOptions {
            // Every read extracts: a cache of hot records would hide what is measured.
            record_cache_bytes: 0,
            ..ShardOptions::default()
        },
    )?;
    crate::loading::put_rows(&shard, &table, 1000)?;
    shard.compact_all()?;
    for segment in shard.segments() {
        segment.add_attribute_layer(segment.build_attribute_layer(attribute as u16)?);
    }

    let names: Vec<String> = args.columns.clone();
    let forms: [(&str, Option<Vec<String>>); 3] = [
        ("keys", Some(Vec::new())),
        ("columns", Some(names.clone())),
        ("records", None),
    ];
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); forms.len()];
    let mut rows_answered = Vec::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed);
    let mut wrong = Vec::new();
    for round in 0..args.rounds {
        let (value, rows) = &values[rng.gen_range(0..values.len())];
        rows_answered.push(rows.len());
        // The forms in a rotating order, so none always runs first.
        for k in 0..forms.len() {
            let f = (round + k) % forms.len();
            let (form, projection) = &forms[f];
            let started = Instant::now();
            let result = shard.search(&Query {
                predicate: Predicate::Eq(args.attribute.clone(), value.clone()),
                projection: projection.clone(),
                limit: None,
                read: ReadOptions::default(),
            })?;
            times[f].push(started.elapsed());
            // Check: the keys, and each asked column's value.
            let mut expected: Vec<&puffer_query::import::ImportedRow> =
                rows.iter().map(|&r| &table.rows[r]).collect();
            expected.sort_by(|a, b| a.key.cmp(&b.key));
            let keys_match = result.rows.len() == expected.len()
                && result
                    .rows
                    .iter()
                    .zip(&expected)
                    .all(|(got, want)| got.key == want.key);
            let values_match = *form != "columns"
                || result.rows.iter().zip(&expected).all(|(got, want)| {
                    columns
                        .iter()
                        .zip(&names)
                        .all(|(&c, name)| got.values.get(name) == want.values[c].as_ref())
                });
            if !(keys_match && values_match) {
                wrong.push(format!("{form} {} = {value:?}", args.attribute));
            }
        }
    }
    let mut sorted_rows = rows_answered.clone();
    sorted_rows.sort_unstable();
    let median_rows = sorted_rows[sorted_rows.len() / 2];
    let p = |f: usize, q: f64| quantile_us(&mut times[f].clone(), q);
    println!(
        "columns on {}: {} records, {} = value (median {} rows), layer on {}; {} rounds",
        dataset_label(&args.input),
        table.len(),
        args.attribute,
        median_rows,
        args.attribute,
        args.rounds
    );
    println!("form        p50 ms     p99 ms");
    for (f, (form, _)) in forms.iter().enumerate() {
        let label = if *form == "columns" {
            format!("{form} ({})", names.join(", "))
        } else {
            form.to_string()
        };
        println!(
            "{label:<24} {:>9.2} {:>10.2}",
            p(f, 0.5) / 1e3,
            p(f, 0.99) / 1e3
        );
    }
    println!("answers checked: {} wrong", wrong.len());
    for w in wrong.iter().take(5) {
        println!("  wrong: {w}");
    }
    println!(
        "{}",
        json!({
            "experiment": "columns",
            "dataset": dataset_label(&args.input),
            "records": table.len(),
            "attribute": args.attribute,
            "columns": names,
            "median_rows": median_rows,
            "rounds": args.rounds,
            "p50_us": {"keys": round(p(0, 0.5), 1), "columns": round(p(1, 0.5), 1), "records": round(p(2, 0.5), 1)},
            "p99_us": {"keys": round(p(0, 0.99), 1), "columns": round(p(1, 0.99), 1), "records": round(p(2, 0.99), 1)},
            "wrong_answers": wrong.len(),
        })
    );
    ensure!(wrong.is_empty(), "{} answers were wrong", wrong.len());
    Ok(())
}
