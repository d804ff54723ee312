//! The listings as the experiment's table holds them while its updates change them.
//!
//! An update sets one listing's price or rating to the one another listing (its donor)
//! had in the file. Until 2026-12-04 a donor was any listing, the table was loaded as
//! the files have it, and searches took their values from the listings as loaded. A
//! write-heavy run updates each of the 26,458 listings two or three times, so within a
//! run's first minutes the table held Hong Kong's prices in Dublin's neighbourhoods
//! and a search for a listing's neighbourhood and price no longer found that listing:
//! the table drifted away from what the searches asked. The model estimates the rows a
//! search reads from a sample of the table as it is when asked, so a calibration and
//! the configurations it predicted were measured on tables other than those estimated.
//! Now:
//! - a donor is a listing of the same neighbourhood (`locality`) holding the attribute
//!   (any listing holding it, where no listing of the neighbourhood does): prices and
//!   ratings stay those of their place, as a real listing's new price would;
//! - the table is loaded as those updates leave it, each listing's price and rating
//!   drawn from its donors (the update process's steady state: donors are drawn from
//!   the files' values, so nothing drifts further however long a run is), and the
//!   first minute's table is the last one's;
//! - searches take the values a listing holds now ([`Listings::value`]), so every
//!   search finds at least the listing it was drawn from.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{bail, Context};
use puffer_store::{Record, Value};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::workload::UPDATED;

/// The listings, with the file's values and which donor's value each updated
/// attribute of each listing holds now.
pub struct Listings {
    /// As read from the files.
    originals: Vec<Record>,
    /// Per updated attribute ([`UPDATED`]'s order), per listing: the pool its donors
    /// come from (an index into `pools[k]`).
    pool_of: Vec<Vec<u32>>,
    /// Per updated attribute, per pool: the listings holding that attribute.
    pools: Vec<Vec<Vec<u32>>>,
    /// Per updated attribute, per listing: the listing whose file value it holds now.
    /// Set after the update is written; a search drawn in between asks the value
    /// before, as a client reading a moment earlier would.
    holders: Vec<Vec<AtomicU32>>,
}

impl Listings {
    /// `originals` with each updated attribute of each listing drawn from its donors
    /// (from `seed`).
    pub fn draw(originals: Vec<Record>, seed: u64) -> anyhow::Result<Listings> {
        if originals.len() >= u32::MAX as usize {
            bail!(
                "{} listings: at most {} are indexed",
                originals.len(),
                u32::MAX - 1
            );
        }
        // Places by their value's debug form (values of floats have no `Eq`).
        let mut places: HashMap<Option<String>, u32> = HashMap::new();
        let place_of: Vec<u32> = originals
            .iter()
            .map(|record| {
                let next = places.len() as u32;
                let place = record.values.get("locality").map(|v| format!("{v:?}"));
                *places.entry(place).or_insert(next)
            })
            .collect();
        let mut rng = StdRng::seed_from_u64(seed ^ 0x115f_1265);
        let mut pool_of = Vec::new();
        let mut pools = Vec::new();
        let mut holders = Vec::new();
        for attribute in UPDATED {
            // Pool p < places: the place's listings holding the attribute; the last
            // pool: every listing holding it, for places where none does.
            let mut by_place: Vec<Vec<u32>> = vec![Vec::new(); places.len() + 1];
            for (i, record) in originals.iter().enumerate() {
                if record.values.contains_key(attribute) {
                    by_place[place_of[i] as usize].push(i as u32);
                    by_place[places.len()].push(i as u32);
                }
            }
            if by_place[places.len()].is_empty() {
                bail!("no listing has a {attribute}: updates would have no donor");
            }
            let pools_of_attribute: Vec<u32> = place_of
                .iter()
                .map(|&p| {
                    if by_place[p as usize].is_empty() {
                        places.len() as u32
                    } else {
                        p
                    }
                })
                .collect();
            let drawn: Vec<AtomicU32> = pools_of_attribute
                .iter()
                .map(|&p| {
                    let pool = &by_place[p as usize];
                    AtomicU32::new(pool[rng.gen_range(0..pool.len())])
                })
                .collect();
            pool_of.push(pools_of_attribute);
            pools.push(by_place);
            holders.push(drawn);
        }
        Ok(Listings {
            originals,
            pool_of,
            pools,
            holders,
        })
    }

    pub fn len(&self) -> usize {
        self.originals.len()
    }

    /// Listing `i`'s key.
    pub fn key(&self, i: usize) -> &[u8] {
        &self.originals[i].key
    }

    /// The value listing `i` holds now for `attribute`.
    pub fn value(&self, i: usize, attribute: &str) -> Option<&Value> {
        match updated_index(attribute) {
            Some(k) => {
                let holder = self.holders[k][i].load(Ordering::Relaxed) as usize;
                self.originals[holder].values.get(attribute)
            }
            None => self.originals[i].values.get(attribute),
        }
    }

    /// Listing `i` as it is now (every updated attribute held: donors hold it).
    pub fn record(&self, i: usize) -> Record {
        let mut record = self.originals[i].clone();
        for attribute in UPDATED {
            if let Some(value) = self.value(i, attribute) {
                record.values.insert(attribute.into(), value.clone());
            }
        }
        record
    }

    /// Every listing as it is now.
    pub fn records(&self) -> Vec<Record> {
        (0..self.len()).map(|i| self.record(i)).collect()
    }

    /// A donor for listing `i`'s updated attribute `k` ([`UPDATED`]'s order), and the
    /// value it gives.
    pub fn donor(&self, i: usize, k: usize, rng: &mut StdRng) -> (u32, &Value) {
        let pool = &self.pools[k][self.pool_of[k][i] as usize];
        let donor = pool[rng.gen_range(0..pool.len())];
        let value = self.originals[donor as usize]
            .values
            .get(UPDATED[k])
            .expect("a pool holds the listings that have the attribute");
        (donor, value)
    }

    /// Listing `i`'s updated attribute `k` now holds `donor`'s value.
    pub fn set_holder(&self, i: usize, k: usize, donor: u32) {
        self.holders[k][i].store(donor, Ordering::Relaxed);
    }
}

/// `attribute`'s position in [`UPDATED`].
pub fn updated_index(attribute: &str) -> Option<usize> {
    UPDATED.iter().position(|a| *a == attribute)
}

/// [`updated_index`], or an error naming the attribute.
pub fn updated_index_of(attribute: &str) -> anyhow::Result<usize> {
    updated_index(attribute)
        .with_context(|| format!("{attribute:?} is not one of the updated {UPDATED:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing(key: &str, locality: Option<&str>, price: Option<f64>) -> Record {
        let mut record = Record::new(key.to_string());
        if let Some(l) = locality {
            record.values.insert("locality".into(), Value::str(l));
        }
        if let Some(p) = price {
            record.values.insert("price".into(), Value::Float(p));
            record
                .values
                .insert("ratings".into(), Value::Float(p / 1000.0));
        }
        record
    }

    /// Dublin's listings priced 100 to 103, Hong Kong's 900 to 903, one listing
    /// without a price in each, one without a place, and a place with no price.
    fn originals() -> Vec<Record> {
        let mut records = Vec::new();
        for i in 0..4 {
            records.push(listing(
                &format!("d{i}"),
                Some("dublin"),
                Some(100.0 + f64::from(i)),
            ));
            records.push(listing(
                &format!("h{i}"),
                Some("hk"),
                Some(900.0 + f64::from(i)),
            ));
        }
        records.push(listing("d-none", Some("dublin"), None));
        records.push(listing("h-none", Some("hk"), None));
        records.push(listing("nowhere", None, Some(5.0)));
        records.push(listing("moon", Some("moon"), None));
        records
    }

    /// The file values a listing may hold: its place's, or anybody's where its place
    /// has none (worked out from the records by hand).
    fn allowed(key: &str) -> Vec<f64> {
        match key.chars().next() {
            Some('d') => vec![100.0, 101.0, 102.0, 103.0],
            Some('h') => vec![900.0, 901.0, 902.0, 903.0],
            Some('n') => vec![5.0],
            _ => vec![100.0, 101.0, 102.0, 103.0, 900.0, 901.0, 902.0, 903.0, 5.0],
        }
    }

    fn price_of(record: &Record) -> f64 {
        match record.values.get("price") {
            Some(Value::Float(p)) => *p,
            other => panic!(
                "{:?}: price {other:?}",
                String::from_utf8_lossy(&record.key)
            ),
        }
    }

    #[test]
    fn listings_are_drawn_and_updated_within_their_place() {
        let listings = Listings::draw(originals(), 7).unwrap();
        let k = updated_index_of("price").unwrap();
        let mut rng = StdRng::seed_from_u64(3);
        for step in 0..2_000 {
            for (i, record) in listings.records().iter().enumerate() {
                let key = String::from_utf8_lossy(&record.key).to_string();
                let price = price_of(record);
                assert!(
                    allowed(&key).contains(&price),
                    "step {step}: {key} holds {price}"
                );
                assert_eq!(listings.value(i, "price"), record.values.get("price"));
                // Attributes no update changes stay the file's.
                assert_eq!(
                    record.values.get("locality"),
                    originals()[i].values.get("locality")
                );
            }
            let i = rng.gen_range(0..listings.len());
            let (donor, value) = listings.donor(i, k, &mut rng);
            let value = value.clone();
            listings.set_holder(i, k, donor);
            assert_eq!(listings.value(i, "price"), Some(&value));
        }
        // The moon's donors are everybody's: 200 draws give more than four values.
        let moon = listings.len() - 1;
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..200 {
            let (_, value) = listings.donor(moon, k, &mut rng);
            seen.insert(value_bits(value));
        }
        assert!(seen.len() > 4, "{seen:?}");
    }

    fn value_bits(value: &Value) -> u64 {
        match value {
            Value::Float(p) => p.to_bits(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_same_seed_draws_the_same_table() {
        let a = Listings::draw(originals(), 11).unwrap().records();
        let b = Listings::draw(originals(), 11).unwrap().records();
        assert_eq!(a, b);
        let prices = |seed| -> Vec<f64> {
            Listings::draw(originals(), seed)
                .unwrap()
                .records()
                .iter()
                .map(price_of)
                .collect()
        };
        assert!(
            (0..20).any(|seed| prices(seed) != prices(11)),
            "the seed is ignored"
        );
    }

    #[test]
    fn attributes_nobody_holds_are_refused() {
        let records = vec![listing("a", Some("x"), None)];
        let error = Listings::draw(records, 1)
            .err()
            .expect("no donor")
            .to_string();
        assert!(error.contains("no listing has a price"), "{error}");
        assert!(updated_index_of("locality").is_err());
    }
}
