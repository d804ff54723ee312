//! Analytics SQL against SQLite as the oracle: random listings (with missing values)
//! and a small dimension table, loaded into both; every query's answer must be the
//! same (rows compared as multisets unless the query orders them, numbers with a
//! relative tolerance), from the log stage, from segments, and from segments with
//! column layers. Also: the analytics path and the store's own path give the
//! same rows for the simple selects both take.

use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use puffer_adapt::attributes::LayerKind;
use puffer_analytics::compare::{same_rows, sort_rows, Cell};
use puffer_analytics::{run, AnalyticsOptions};
use puffer_node::serving::AttributePin;
use puffer_node::{Answer, Database, TableLayout};
use puffer_store::{AttrType, Attribute, Record, Schema, Value, WriteOp};

const CITIES: [&str; 5] = ["antwerp", "boston", "dublin", "edinburgh", "hongkong"];
const DAY_MICROS: i64 = 86_400_000_000;

/// One listing: city, price, rooms, pets, when seen (micros); `None`: missing.
type Listing = (
    Option<usize>,
    Option<f64>,
    Option<i64>,
    Option<bool>,
    Option<i64>,
);

fn listing() -> impl Strategy<Value = Listing> {
    (
        proptest::option::weighted(0.9, 0..CITIES.len()),
        proptest::option::weighted(0.85, (0u32..4000).prop_map(|c| f64::from(c) / 8.0)),
        proptest::option::weighted(0.85, 0i64..6),
        proptest::option::weighted(0.8, any::<bool>()),
        proptest::option::weighted(0.9, 0i64..(20 * DAY_MICROS)),
    )
}

fn schema() -> Schema {
    let attribute = |name: &str, attr_type| Attribute {
        name: name.into(),
        attr_type,
    };
    Schema::new(
        "id",
        vec![
            attribute("city", AttrType::String),
            attribute("price", AttrType::Float),
            attribute("rooms", AttrType::Int),
            attribute("pets", AttrType::Bool),
            attribute("seen", AttrType::Timestamp),
        ],
    )
    .unwrap()
}

fn record(index: usize, listing: &Listing) -> Record {
    let (city, price, rooms, pets, seen) = *listing;
    let mut record = Record::new(format!("l{index:04}"));
    let mut put = |name: &str, value: Option<Value>| {
        if let Some(value) = value {
            record.values.insert(name.into(), value);
        }
    };
    put("city", city.map(|c| Value::String(CITIES[c].into())));
    put("price", price.map(Value::Float));
    put("rooms", rooms.map(Value::Int));
    put("pets", pets.map(Value::Bool));
    put("seen", seen.map(Value::Timestamp));
    record
}

/// The database (listings over 3 shards, cities in 1) and SQLite with the same rows.
fn load(listings: &[Listing]) -> (tempfile::TempDir, Arc<Database>, rusqlite::Connection) {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Database::open(dir.path(), Default::default()).unwrap());
    let layout = TableLayout {
        shards: 3,
        replicas: 1,
    };
    db.create_table_with("listings", schema(), layout).unwrap();
    let country = Attribute {
        name: "country".into(),
        attr_type: AttrType::String,
    };
    db.create_table("cities", Schema::new("city", vec![country]).unwrap())
        .unwrap();
    let sqlite = rusqlite::Connection::open_in_memory().unwrap();
    sqlite
        .execute_batch(
            "PRAGMA case_sensitive_like = ON;
             CREATE TABLE listings (id TEXT PRIMARY KEY, city TEXT, price REAL, rooms INTEGER,
                                    pets INTEGER, seen INTEGER);
             CREATE TABLE cities (city TEXT PRIMARY KEY, country TEXT);",
        )
        .unwrap();
    let records: Vec<WriteOp> = listings
        .iter()
        .enumerate()
        .map(|(i, l)| WriteOp::Put(record(i, l)))
        .collect();
    if !records.is_empty() {
        db.write_batch(vec![("listings".into(), records)]).unwrap();
    }
    for (i, (city, price, rooms, pets, seen)) in listings.iter().enumerate() {
        sqlite
            .execute(
                "INSERT INTO listings VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                rusqlite::params![
                    format!("l{i:04}"),
                    city.map(|c| CITIES[c]),
                    price,
                    rooms,
                    pets,
                    seen
                ],
            )
            .unwrap();
    }
    // Hong Kong's country is missing: an inner join drops it, a left join keeps it.
    let countries = [
        ("antwerp", Some("BE")),
        ("boston", Some("US")),
        ("dublin", Some("IE")),
        ("edinburgh", Some("GB")),
        ("hongkong", None),
    ];
    let mut cities = Vec::new();
    for (city, country) in countries {
        let mut record = Record::new(city);
        if let Some(country) = country {
            record
                .values
                .insert("country".into(), Value::String(country.into()));
        }
        cities.push(WriteOp::Put(record));
        sqlite
            .execute(
                "INSERT INTO cities VALUES (?1, ?2)",
                rusqlite::params![city, country],
            )
            .unwrap();
    }
    db.write_batch(vec![("cities".into(), cities)]).unwrap();
    (dir, db, sqlite)
}

fn cell_of_sqlite(value: rusqlite::types::ValueRef<'_>) -> Cell {
    use rusqlite::types::ValueRef;
    match value {
        ValueRef::Null => Cell::Null,
        ValueRef::Integer(x) => Cell::Number(x as f64),
        ValueRef::Real(x) => Cell::Number(x),
        ValueRef::Text(t) => Cell::Text(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(_) => panic!("no blobs in these tables"),
    }
}

fn ours(db: &Arc<Database>, query: &str) -> Vec<Vec<Cell>> {
    ours_with(db, query, &AnalyticsOptions::default())
}

fn ours_with(db: &Arc<Database>, query: &str, options: &AnalyticsOptions) -> Vec<Vec<Cell>> {
    match run(db, query, None, options) {
        Ok(Answer::Computed {
            rows, truncated, ..
        }) => {
            assert!(!truncated, "{query}: cut");
            rows.iter()
                .map(|r| r.iter().map(|v| Cell::of_value(v.as_ref())).collect())
                .collect()
        }
        other => panic!("{query}: {other:?}"),
    }
}

fn theirs(sqlite: &rusqlite::Connection, query: &str) -> Vec<Vec<Cell>> {
    let mut statement = sqlite.prepare(query).unwrap();
    let width = statement.column_count();
    statement
        .query_map([], |row| {
            Ok((0..width)
                .map(|i| cell_of_sqlite(row.get_ref(i).unwrap()))
                .collect())
        })
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// Queries as (PufferDB, SQLite) text where their dialects differ, and whether the
/// order of the answer is the query's (else rows are compared as multisets).
const QUERIES: &[(&str, &str, bool)] = &[
    ("SELECT city, COUNT(*) FROM listings GROUP BY city", "", false),
    ("SELECT COUNT(*), SUM(rooms), MIN(price), MAX(price) FROM listings WHERE rooms >= 2", "", false),
    ("SELECT city, AVG(price) FROM listings WHERE city = 'dublin' OR city = 'boston' GROUP BY city", "", false),
    ("SELECT id, price FROM listings WHERE price IS NOT NULL ORDER BY price DESC, id LIMIT 3", "", true),
    ("SELECT city, COUNT(DISTINCT rooms) FROM listings GROUP BY city HAVING COUNT(*) > 1", "", false),
    ("SELECT c.country, COUNT(*) FROM listings l JOIN cities c ON l.city = c.city GROUP BY c.country", "", false),
    ("SELECT c.city, c.country, COUNT(l.id) FROM cities c LEFT JOIN listings l ON l.city = c.city GROUP BY c.city, c.country", "", false),
    ("WITH big AS (SELECT * FROM listings WHERE rooms > 2) SELECT city, MAX(price) FROM big GROUP BY city", "", false),
    ("SELECT COUNT(*) FROM listings WHERE price > (SELECT AVG(price) FROM listings)", "", false),
    ("SELECT DISTINCT city FROM listings WHERE city LIKE 'd%' OR city LIKE '%on'", "", false),
    ("SELECT CASE WHEN rooms > 2 THEN 'big' ELSE 'small' END AS size, COUNT(*) FROM listings GROUP BY 1", "", false),
    ("SELECT city, SUM(rooms) FROM listings WHERE (price BETWEEN 10 AND 50 OR city IN ('antwerp', 'hongkong')) AND pets GROUP BY city", "", false),
    ("SELECT date_trunc('day', seen) AS day, COUNT(*) FROM listings WHERE seen < to_timestamp_micros(864000000000) GROUP BY 1",
     "SELECT (seen / 86400000000) * 86400000000 AS day, COUNT(*) FROM listings WHERE seen < 864000000000 GROUP BY 1", false),
    ("SELECT pets, COUNT(*), AVG(rooms) FROM listings GROUP BY pets", "", false),
    // Counts under filters the store evaluates whole: store counts, no column read.
    ("SELECT COUNT(*) FROM listings WHERE city IN ('dublin', 'boston') AND rooms >= 2", "", false),
    ("SELECT COUNT(*) FROM listings WHERE city LIKE '%o%' OR price < 30", "", false),
    ("SELECT COUNT(*) FROM listings WHERE seen IS NOT NULL AND pets = false", "", false),
    ("SELECT id FROM listings WHERE rooms = 3 AND price < 100 ORDER BY id", "", true),
];

/// Keeps column layers of `attributes` on every replica of `table` (pinned, as an
/// operator would) and waits until every segment holds them.
fn hold_column_layers(db: &Database, table: &str, attributes: &[&str]) {
    let schema = db.table(table).unwrap().schema();
    let node = db.node();
    let replicas: Vec<u64> = node
        .status()
        .replicas
        .iter()
        .filter(|r| r.table == table)
        .map(|r| r.id)
        .collect();
    for &replica in &replicas {
        for name in attributes {
            let attribute = schema.require(name).unwrap();
            node.pin_attribute(
                replica,
                LayerKind::Column,
                attribute,
                Some(AttributePin::Keep),
            )
            .unwrap();
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        node.tick();
        let status = node.status();
        let mine: Vec<_> = status
            .replicas
            .iter()
            .filter(|r| r.table == table)
            .collect();
        let held = mine.iter().all(|r| {
            attributes.iter().all(|name| {
                let attribute = schema.require(name).unwrap();
                r.column_layers.iter().any(|c| {
                    assert_eq!(c.layers.failure, None, "a column layer failed to build");
                    c.layers.attribute == attribute && c.layers.segments_held == c.layers.segments
                })
            })
        });
        if held {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "column layers never built: {mine:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Every query against SQLite, with the records in the log stage, then compacted into
/// segments, then with column layers of some attributes (values from layers and from
/// fields in one scan) and of all (predicates evaluated on the layers).
fn check_all(listings: &[Listing]) {
    let (_dir, db, sqlite) = load(listings);
    check_queries(&db, &sqlite, "log stage");
    db.table("listings").unwrap().compact_all().unwrap();
    db.table("cities").unwrap().compact_all().unwrap();
    check_queries(&db, &sqlite, "segments");
    hold_column_layers(&db, "listings", &["city", "price"]);
    check_queries(&db, &sqlite, "column layers of city and price");
    hold_column_layers(&db, "listings", &["city", "price", "rooms", "pets", "seen"]);
    hold_column_layers(&db, "cities", &["country"]);
    check_queries(&db, &sqlite, "column layers of every attribute");
}

fn check_queries(db: &Arc<Database>, sqlite: &rusqlite::Connection, stage: &str) {
    for (query, sqlite_query, ordered) in QUERIES {
        let sqlite_query = if sqlite_query.is_empty() {
            query
        } else {
            sqlite_query
        };
        let mut want = theirs(sqlite, sqlite_query);
        if !ordered {
            sort_rows(&mut want);
        }
        // With aggregates pushed into the store where it can compute them, and without.
        for push_aggregates in [true, false] {
            let options = AnalyticsOptions {
                push_aggregates,
                ..AnalyticsOptions::default()
            };
            let mut got = ours_with(db, query, &options);
            if !ordered {
                sort_rows(&mut got);
            }
            assert!(
                same_rows(&got, &want),
                "{query} ({stage}, aggregates pushed: {push_aggregates})\nPufferDB: {got:?}\nSQLite:   {want:?}"
            );
        }
    }
}

/// Which of [`QUERIES`] the store computes the aggregates of (by their index): those
/// aggregating plain columns of one table under filters it evaluates whole.
const PUSHED: &[usize] = &[0, 1, 2, 7, 8, 9, 11, 12, 13, 14, 15, 16];

#[test]
fn the_store_computes_the_aggregates_it_can() {
    let (_dir, db, _) = load(&[]);
    for (i, (query, _, _)) in QUERIES.iter().enumerate() {
        let plan = puffer_analytics::explain(&db, query, &AnalyticsOptions::default()).unwrap();
        assert_eq!(
            plan.contains("__puffer_aggregate"),
            PUSHED.contains(&i),
            "query {i}: {query}\n{plan}"
        );
        let off = AnalyticsOptions {
            push_aggregates: false,
            ..AnalyticsOptions::default()
        };
        let plan = puffer_analytics::explain(&db, query, &off).unwrap();
        assert!(!plan.contains("__puffer_aggregate"), "{query}\n{plan}");
    }
}

/// A scan tells DataFusion's physical optimizer its exact row count and each column's
/// NULL count: against the listings themselves, for filters the store evaluates.
#[test]
fn scans_report_exact_row_and_null_counts() {
    use proptest::strategy::ValueTree;
    let mut rng = proptest::test_runner::TestRunner::deterministic();
    let listings: Vec<Listing> = (0..120)
        .map(|_| listing().new_tree(&mut rng).unwrap().current())
        .collect();
    let (_dir, db, _) = load(&listings);
    for (city, filter) in [
        (None, "".to_string()),
        (Some(1), " WHERE city = 'boston'".to_string()),
    ] {
        let query = format!("SELECT price, pets FROM listings{filter}");
        let plan =
            puffer_analytics::explain_physical(&db, &query, &AnalyticsOptions::default()).unwrap();
        let scan = plan
            .lines()
            .find(|line| line.contains("DataSourceExec"))
            .unwrap_or_else(|| panic!("no scan in\n{plan}"));
        let rows: Vec<&Listing> = listings
            .iter()
            .filter(|l| city.is_none() || l.0 == city)
            .collect();
        let no_price = rows.iter().filter(|l| l.1.is_none()).count();
        let no_pets = rows.iter().filter(|l| l.3.is_none()).count();
        assert!(
            scan.contains(&format!("Rows=Exact({})", rows.len())),
            "{query}: {scan}"
        );
        assert!(
            scan.contains(&format!("(Col[0]: Null=Exact({no_price})"))
                && scan.contains(&format!("(Col[1]: Null=Exact({no_pets})")),
            "{query}: {no_price} and {no_pets} NULLs: {scan}"
        );
    }
}

// Twelve random tables in all, as two tests of six: one test's cases run one after
// another (35 s on one core, unoptimised DataFusion planning most of it), two run side
// by side on the test harness's threads.
proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    #[test]
    fn analytics_answers_equal_sqlites(listings in proptest::collection::vec(listing(), 0..150)) {
        check_all(&listings);
    }

    #[test]
    fn analytics_answers_equal_sqlites_on_other_tables(
        listings in proptest::collection::vec(listing(), 0..150)
    ) {
        check_all(&listings);
    }
}

/// The same simple selects through the store's own path and through DataFusion (whose
/// filters the store then evaluates as pushed predicates).
#[test]
fn both_paths_give_the_same_rows() {
    let listings: Vec<Listing> = (0..200)
        .map(|i| {
            let i = i as i64;
            (
                (i % 7 != 0).then_some((i % 5) as usize),
                (i % 4 != 0).then_some((i * 37 % 400) as f64 / 4.0),
                (i % 6 != 0).then_some(i % 5),
                (i % 3 != 0).then_some(i % 2 == 0),
                Some(i * DAY_MICROS / 10),
            )
        })
        .collect();
    let (_dir, db, _) = load(&listings);
    let mut compared = 0;
    let filters = [
        "city = 'boston'",
        "price > 40",
        "price <= 12.5",
        "rooms BETWEEN 1 AND 3",
        "city IN ('dublin', 'antwerp')",
        "city LIKE 'ed%'",
        "city LIKE '%ong'",
        "city LIKE '%in%'",
        "pets = true AND rooms >= 2",
        "price < 20 OR rooms = 4",
        "city IS NOT NULL AND price > 90",
    ];
    for filter in filters {
        let query = format!("SELECT id, city, price, rooms FROM listings WHERE {filter}");
        let direct = match db.execute_sql(&query).unwrap() {
            Answer::Rows { rows, .. } => rows,
            other => panic!("{query}: {other:?}"),
        };
        let want: Vec<Vec<Cell>> = direct
            .iter()
            .map(|r| {
                let mut row = vec![Cell::Text(String::from_utf8_lossy(&r.key).into_owned())];
                for column in ["city", "price", "rooms"] {
                    row.push(Cell::of_value(r.values.get(column)));
                }
                row
            })
            .collect();
        let got = ours(&db, &format!("{query} ORDER BY id"));
        assert!(
            same_rows(&got, &want),
            "{filter}\nanalytics: {got:?}\ndirect: {want:?}"
        );
        compared += want.len();
    }
    assert!(
        compared > 300,
        "the filters matched only {compared} rows in all"
    );
}

/// Window functions, `date_bin` and approximate percentiles, which the issue names and
/// the random suite leaves out, against SQLite (and, for the percentile, the exact one);
/// a planning error says where in the text it is.
#[test]
fn windows_bins_percentiles_and_error_positions() {
    let listings: Vec<Listing> = (0..240)
        .map(|i| {
            let i = i as i64;
            (
                (i % 9 != 0).then_some((i % 5) as usize),
                (i % 4 != 0).then_some((i * 37 % 400) as f64 / 4.0),
                (i % 6 != 0).then_some(i % 5),
                (i % 3 != 0).then_some(i % 2 == 0),
                (i % 7 != 0).then_some(i * DAY_MICROS / 9),
            )
        })
        .collect();
    let (_dir, db, sqlite) = load(&listings);
    db.table("listings").unwrap().compact_all().unwrap();
    let same_as_sqlite = [
        (
            "SELECT id, ROW_NUMBER() OVER (PARTITION BY city ORDER BY id) AS r, \
             SUM(rooms) OVER (PARTITION BY city ORDER BY id ROWS UNBOUNDED PRECEDING) AS s \
             FROM listings ORDER BY id",
            "",
        ),
        (
            "SELECT date_bin(INTERVAL '6 hours', seen) AS b, COUNT(*) FROM listings \
             WHERE seen IS NOT NULL GROUP BY 1 ORDER BY 1",
            "SELECT (seen / 21600000000) * 21600000000 AS b, COUNT(*) FROM listings \
             WHERE seen IS NOT NULL GROUP BY 1 ORDER BY 1",
        ),
        (
            "SELECT city, LAG(price) OVER (PARTITION BY city ORDER BY id) AS before FROM listings \
             WHERE city IS NOT NULL ORDER BY id",
            "",
        ),
    ];
    for (query, sqlite_query) in same_as_sqlite {
        let want = theirs(
            &sqlite,
            if sqlite_query.is_empty() {
                query
            } else {
                sqlite_query
            },
        );
        let got = ours(&db, query);
        assert!(want.len() > 20, "{query}: {} rows", want.len());
        assert!(
            same_rows(&got, &want),
            "{query}\nPufferDB: {got:?}\nSQLite:   {want:?}"
        );
    }
    // The median of the prices, approximately: between the exact 45th and 55th
    // percentiles.
    let mut prices: Vec<f64> = listings.iter().filter_map(|l| l.1).collect();
    prices.sort_by(f64::total_cmp);
    let at = |q: f64| prices[((prices.len() - 1) as f64 * q).round() as usize];
    let got = ours(
        &db,
        "SELECT approx_percentile_cont(0.5) WITHIN GROUP (ORDER BY price) FROM listings",
    );
    let [Cell::Number(median)] = got[..].first().map(|r| &r[..]).unwrap_or_default() else {
        panic!("{got:?}");
    };
    assert!(
        (at(0.45)..=at(0.55)).contains(median),
        "approximate median {median}, exact 45th to 55th percentiles {} to {}",
        at(0.45),
        at(0.55)
    );
    let error = run(
        &db,
        "SELECT id,\n  nosuch FROM listings",
        None,
        &AnalyticsOptions::default(),
    )
    .unwrap_err();
    assert!(
        error.to_string().contains("line 2, column 3"),
        "no position in: {error}"
    );
}

/// Time buckets cut by the store equal DataFusion's own `date_trunc`, for every unit,
/// over timestamps from 1780 to 2160 (leap years, centuries, weeks across years, times
/// before the epoch) and records without one.
#[test]
fn time_buckets_cut_by_the_store_equal_datafusions() {
    let mut state = 0x5eed_u64;
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        state >> 11
    };
    let span = 380 * 365 * DAY_MICROS;
    let listings: Vec<Listing> = (0..400)
        .map(|i| {
            let seen =
                (i % 13 != 0).then(|| (next() % span as u64) as i64 - 190 * 365 * DAY_MICROS);
            (Some(i % 5), None, Some((i % 4) as i64), None, seen)
        })
        .collect();
    let (_dir, db, _) = load(&listings);
    db.table("listings").unwrap().compact_all().unwrap();
    let off = AnalyticsOptions {
        push_aggregates: false,
        ..AnalyticsOptions::default()
    };
    for unit in [
        "second", "minute", "hour", "day", "week", "month", "quarter", "year",
    ] {
        let query = format!(
            "SELECT date_trunc('{unit}', seen) AS b, COUNT(*), MIN(seen), SUM(rooms) FROM listings WHERE rooms < 3 GROUP BY 1"
        );
        let plan = puffer_analytics::explain(&db, &query, &AnalyticsOptions::default()).unwrap();
        assert!(
            plan.contains("__puffer_aggregate"),
            "{unit}: not pushed\n{plan}"
        );
        let mut pushed = ours(&db, &query);
        let mut theirs = ours_with(&db, &query, &off);
        sort_rows(&mut pushed);
        sort_rows(&mut theirs);
        assert!(theirs.len() > 20, "{unit}: only {} buckets", theirs.len());
        assert!(
            same_rows(&pushed, &theirs),
            "{unit}\nstore: {pushed:?}\nDataFusion: {theirs:?}"
        );
    }
}

/// A scan reads at most `max_scan_rows` records (refused past it, whatever the engine
/// would make of them); a count holds none, so no bound applies to it, nor to a grouped
/// `COUNT(*)` counted from the suffix array of segments; an answer past
/// `max_result_rows` is cut and says so.
#[test]
fn scans_past_the_bound_are_refused_and_long_answers_cut() {
    let listings: Vec<Listing> = (0..20)
        .map(|i| (Some(i % 5), None, Some(i as i64), None, None))
        .collect();
    let (_dir, db, _) = load(&listings);
    let bounded = AnalyticsOptions {
        max_scan_rows: 10,
        max_result_rows: 3,
        ..AnalyticsOptions::default()
    };
    let error = run(
        &db,
        "SELECT city, COUNT(*) FROM listings GROUP BY city",
        None,
        &bounded,
    )
    .unwrap_err();
    assert_eq!(error.code(), "limit_exceeded", "{error}");
    // From segments, the same grouped count reads no record (each group is counted
    // from its suffix-array interval), so the bound does not apply; a grouped sum
    // still reads every value and is refused.
    db.table("listings").unwrap().compact_all().unwrap();
    let scans_bounded = AnalyticsOptions {
        max_scan_rows: 10,
        ..AnalyticsOptions::default()
    };
    let counted = run(
        &db,
        "SELECT city, COUNT(*) FROM listings GROUP BY city",
        None,
        &scans_bounded,
    );
    match counted.unwrap() {
        Answer::Computed { rows, .. } => {
            assert_eq!(rows.len(), 5, "{rows:?}");
            assert!(
                rows.iter().all(|row| row[1] == Some(Value::Int(4))),
                "{rows:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    let error = run(
        &db,
        "SELECT city, SUM(rooms) FROM listings GROUP BY city",
        None,
        &bounded,
    )
    .unwrap_err();
    assert_eq!(error.code(), "limit_exceeded", "{error}");
    // Under the bound: 8 records of two cities read, 2 groups answered.
    let small =
        "SELECT city, COUNT(*) FROM listings WHERE city IN ('antwerp', 'boston') GROUP BY city";
    assert!(
        matches!(run(&db, small, None, &bounded), Ok(Answer::Computed { ref rows, .. }) if rows.len() == 2)
    );
    match run(&db, "SELECT COUNT(*) FROM listings", None, &bounded).unwrap() {
        Answer::Computed { rows, .. } => assert_eq!(rows, vec![vec![Some(Value::Int(20))]]),
        other => panic!("{other:?}"),
    }
    match run(
        &db,
        "SELECT id FROM listings WHERE rooms < 6 ORDER BY id",
        None,
        &bounded,
    )
    .unwrap()
    {
        Answer::Computed {
            rows, truncated, ..
        } => {
            assert!(truncated);
            let want: Vec<Vec<Option<Value>>> = (0..3)
                .map(|i| vec![Some(Value::String(format!("l{i:04}").into()))])
                .collect();
            assert_eq!(rows, want);
        }
        other => panic!("{other:?}"),
    }
}
