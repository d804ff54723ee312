//! The bundled sample table: hotel bookings generated from a fixed seed (the shape of the
//! public hotel-bookings data set: hotel, country, dates, nights, price, cancellation),
//! so the quick start needs no download.

use puffer_node::Database;
use puffer_store::{AttrType, Attribute, Record, Schema, Value, WriteOp};

/// Name of the sample table.
pub const SAMPLE_TABLE: &str = "bookings";
/// Rows in the sample table.
pub const SAMPLE_ROWS: u64 = 5000;

const HOTELS: &[&str] = &["Resort Hotel", "City Hotel"];
const COUNTRIES: &[&str] = &[
    "PRT", "GBR", "FRA", "ESP", "DEU", "IRL", "ITA", "BEL", "NLD", "USA",
];
const SEGMENTS: &[&str] = &[
    "Online TA",
    "Offline TA/TO",
    "Direct",
    "Groups",
    "Corporate",
];
const MEALS: &[&str] = &["BB", "HB", "FB", "SC"];

fn schema() -> Schema {
    let attr = |name: &str, attr_type| Attribute {
        name: name.to_string(),
        attr_type,
    };
    Schema::new(
        "id",
        vec![
            attr("hotel", AttrType::String),
            attr("country", AttrType::String),
            attr("segment", AttrType::String),
            attr("meal", AttrType::String),
            attr("arrival", AttrType::Timestamp),
            attr("nights", AttrType::Int),
            attr("adults", AttrType::Int),
            attr("adr", AttrType::Float),
            attr("canceled", AttrType::Bool),
        ],
    )
    .expect("the sample schema is valid")
}

/// A deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[(self.next() % items.len() as u64) as usize]
    }
}

fn row(rng: &mut Rng, i: u64) -> Record {
    let day_micros = 86_400_000_000i64;
    let first_day = 16_617i64; // 2015-07-01
    let arrival = (first_day + (rng.next() % 790) as i64) * day_micros;
    let mut record = Record::new(format!("b{i:05}"))
        .with("hotel", Value::str(rng.pick(HOTELS)))
        .with("country", Value::str(rng.pick(COUNTRIES)))
        .with("segment", Value::str(rng.pick(SEGMENTS)))
        .with("arrival", Value::Timestamp(arrival))
        .with("nights", Value::Int(1 + (rng.next() % 14) as i64))
        .with("adults", Value::Int(1 + (rng.next() % 3) as i64))
        .with("adr", Value::Float((rng.next() % 25_000) as f64 / 100.0))
        .with("canceled", Value::Bool(rng.next().is_multiple_of(3)));
    if !rng.next().is_multiple_of(5) {
        record = record.with("meal", Value::str(rng.pick(MEALS)));
    }
    record
}

/// Creates and fills the sample table unless it exists; returns whether it did.
pub fn ensure_sample(db: &Database) -> anyhow::Result<bool> {
    if db.table_names().iter().any(|t| t == SAMPLE_TABLE) {
        return Ok(false);
    }
    db.create_table(SAMPLE_TABLE, schema())?;
    let shard = db.table(SAMPLE_TABLE)?;
    let mut rng = Rng(0x005E_ED0F_B00C_1265);
    let rows: Vec<WriteOp> = (0..SAMPLE_ROWS)
        .map(|i| WriteOp::Put(row(&mut rng, i)))
        .collect();
    for batch in rows.chunks(1000) {
        shard.write(batch.to_vec())?;
    }
    shard.compact_all()?;
    Ok(true)
}
