//! The Inside Airbnb listings as the paper's hotels: nine attributes mapped from the
//! listings' columns (the mapping is the experiment's, documented in docs/subspaces.md):
//!
//! | paper      | here       | from                                                   |
//! |------------|------------|--------------------------------------------------------|
//! | locality   | `locality` | `neighbourhood_cleansed`                                |
//! | region     | `region`   | the city of the file (`dublin-listings.csv.gz`)          |
//! | price      | `price`    | `price` (`$1,234.00` as a float)                        |
//! | ratings    | `ratings`  | `review_scores_rating`                                  |
//! | pets       | `pets`     | `amenities` lists "Pets allowed"                        |
//! | pool       | `pool`     | `amenities` lists a pool                                |
//! | stars      | `stars`    | `accommodates` (a small ordinal, like a hotel's stars)  |
//! | postcode   | `postcode` | latitude and longitude to 0.01 degree (about 1 km)      |
//! | category   | `category` | `property_type`                                         |

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use puffer_store::{AttrType, Attribute, Record, Schema, Value};

/// The attributes in schema order (their ids are their positions).
pub const ATTRIBUTES: [(&str, AttrType); 9] = [
    ("locality", AttrType::String),
    ("region", AttrType::String),
    ("price", AttrType::Float),
    ("ratings", AttrType::Float),
    ("pets", AttrType::Bool),
    ("pool", AttrType::Bool),
    ("stars", AttrType::Int),
    ("postcode", AttrType::String),
    ("category", AttrType::String),
];

/// The listings table's schema.
pub fn schema() -> Schema {
    Schema::new(
        "id",
        ATTRIBUTES
            .iter()
            .map(|(name, attr_type)| Attribute {
                name: (*name).into(),
                attr_type: *attr_type,
            })
            .collect(),
    )
    .expect("a valid schema")
}

/// The id of attribute `name`.
pub fn id(name: &str) -> u16 {
    ATTRIBUTES
        .iter()
        .position(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no attribute {name}")) as u16
}

/// Every listing of `inputs` (`<city>-listings.csv.gz`), keys made unique by city.
pub fn load(inputs: &[PathBuf]) -> anyhow::Result<Vec<Record>> {
    let mut records = Vec::new();
    for path in inputs {
        let city = city_of(path)?;
        let file = std::fs::File::open(path).with_context(|| format!("open {}", path.display()))?;
        let reader: Box<dyn Read> = if path.extension().is_some_and(|e| e == "gz") {
            Box::new(flate2::read::GzDecoder::new(file))
        } else {
            Box::new(file)
        };
        let mut csv = csv::ReaderBuilder::new().flexible(true).from_reader(reader);
        let headers = csv.headers()?.clone();
        let column = |name: &str| headers.iter().position(|h| h == name);
        let (Some(id), Some(locality), Some(price), Some(rating)) = (
            column("id"),
            column("neighbourhood_cleansed"),
            column("price"),
            column("review_scores_rating"),
        ) else {
            bail!("{}: not an Inside Airbnb listings file", path.display());
        };
        let (amenities, accommodates, latitude, longitude, property) = (
            column("amenities"),
            column("accommodates"),
            column("latitude"),
            column("longitude"),
            column("property_type"),
        );
        for row in csv.records() {
            let row = row.with_context(|| format!("read {}", path.display()))?;
            let field = |i: Option<usize>| i.and_then(|i| row.get(i)).filter(|f| !f.is_empty());
            let Some(key) = field(Some(id)) else { continue };
            let mut record = Record::new(format!("{city}-{key}"));
            let mut put = |name: &str, value: Option<Value>| {
                if let Some(value) = value {
                    record.values.insert(name.into(), value);
                }
            };
            put("locality", field(Some(locality)).map(Value::str));
            put("region", Some(Value::str(&city)));
            put(
                "price",
                field(Some(price))
                    .and_then(|p| p.replace(['$', ','], "").parse::<f64>().ok())
                    .filter(|p| p.is_finite())
                    .map(Value::Float),
            );
            put(
                "ratings",
                field(Some(rating))
                    .and_then(|r| r.parse::<f64>().ok())
                    .filter(|r| r.is_finite())
                    .map(Value::Float),
            );
            if let Some(list) = field(amenities) {
                let lower = list.to_ascii_lowercase();
                put("pets", Some(Value::Bool(lower.contains("pets allowed"))));
                put("pool", Some(Value::Bool(lower.contains("pool"))));
            }
            put(
                "stars",
                field(accommodates)
                    .and_then(|a| a.parse::<i64>().ok())
                    .map(Value::Int),
            );
            if let (Some(lat), Some(lon)) = (
                field(latitude).and_then(|v| v.parse::<f64>().ok()),
                field(longitude).and_then(|v| v.parse::<f64>().ok()),
            ) {
                put("postcode", Some(Value::str(&format!("{lat:.2}/{lon:.2}"))));
            }
            put("category", field(property).map(Value::str));
            records.push(record);
        }
    }
    if records.is_empty() {
        bail!("no listing in {inputs:?}");
    }
    Ok(records)
}

fn city_of(path: &Path) -> anyhow::Result<String> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("{}: no file name", path.display()))?;
    Ok(name.split('-').next().unwrap_or(name).to_string())
}
