//! SQL against a scan: random WHERE conditions are rendered as SQL text and evaluated on
//! the inserted rows by an independent three-valued-logic evaluator; every SELECT and
//! COUNT(*) must agree, before and after compaction. Plus the errors of the subset.

use puffer_node::{Answer, Database};
use puffer_query::QueryError;
use puffer_store::{Record, ShardOptions, Value};

/// A row as the test sees it: column -> SQL literal value (None = NULL).
#[derive(Clone, Debug)]
struct Row {
    id: String,
    city: Option<String>,
    price: Option<i64>,
    score: Option<f64>,
    active: Option<bool>,
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const CITIES: &[&str] = &[
    "Boston",
    "Dublin",
    "Hong Kong",
    "Antwerp",
    "Bost'on",
    "Edinburgh",
];

fn random_row(rng: &mut Rng, i: u64) -> Row {
    let maybe = |rng: &mut Rng| rng.below(5) != 0;
    Row {
        id: format!("r{i:04}"),
        city: maybe(rng).then(|| CITIES[rng.below(CITIES.len() as u64) as usize].to_string()),
        price: maybe(rng).then(|| rng.below(400) as i64 - 50),
        score: maybe(rng).then(|| (rng.below(100) as f64) / 20.0),
        active: maybe(rng).then(|| rng.below(2) == 0),
    }
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

fn insert_sql(rows: &[Row]) -> String {
    let values: Vec<String> = rows
        .iter()
        .map(|r| {
            let or_null = |v: Option<String>| v.unwrap_or_else(|| "NULL".into());
            format!(
                "({}, {}, {}, {}, {})",
                quote(&r.id),
                or_null(r.city.as_deref().map(quote)),
                or_null(r.price.map(|p| p.to_string())),
                or_null(r.score.map(|s| format!("{s:?}"))),
                or_null(r.active.map(|a| a.to_string())),
            )
        })
        .collect();
    format!(
        "INSERT INTO listings (id, city, price, score, active) VALUES {}",
        values.join(", ")
    )
}

/// A condition of the test's own grammar.
#[derive(Clone, Debug)]
enum Cond {
    Cmp(&'static str, &'static str, Lit),
    Between(&'static str, Lit, Lit, bool),
    In(&'static str, Vec<Lit>, bool),
    Like(&'static str, String),
    NotNull(&'static str),
    Not(Box<Cond>),
    And(Box<Cond>, Box<Cond>),
    Or(Box<Cond>, Box<Cond>),
}

#[derive(Clone, Debug)]
enum Lit {
    Text(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl Lit {
    fn sql(&self) -> String {
        match self {
            Lit::Text(s) => quote(s),
            Lit::Int(x) => x.to_string(),
            Lit::Float(x) => format!("{x:?}"),
            Lit::Bool(b) => b.to_string(),
        }
    }
}

fn random_lit(rng: &mut Rng, column: &str) -> Lit {
    match column {
        "id" => Lit::Text(format!("r{:04}", rng.below(320))),
        "city" => Lit::Text(CITIES[rng.below(CITIES.len() as u64) as usize].to_string()),
        "price" => Lit::Int(rng.below(400) as i64 - 50),
        "score" => Lit::Float(rng.below(100) as f64 / 20.0),
        _ => Lit::Bool(rng.below(2) == 0),
    }
}

fn random_cond(rng: &mut Rng, depth: u32) -> Cond {
    const COLUMNS: [&str; 5] = ["id", "city", "price", "score", "active"];
    let column = COLUMNS[rng.below(5) as usize];
    let leaves = 6;
    match rng.below(if depth == 0 { leaves } else { leaves + 3 }) {
        0 | 1 => {
            let ops = ["=", "<>", "<", "<=", ">", ">="];
            let op = ops[rng.below(6) as usize];
            Cond::Cmp(column, op, random_lit(rng, column))
        }
        2 => {
            let (a, b) = (random_lit(rng, column), random_lit(rng, column));
            Cond::Between(column, a, b, rng.below(3) == 0)
        }
        3 => {
            let values = (0..1 + rng.below(3))
                .map(|_| random_lit(rng, column))
                .collect();
            Cond::In(column, values, rng.below(3) == 0)
        }
        4 => {
            let city = CITIES[rng.below(CITIES.len() as u64) as usize];
            let cut = 1 + rng.below(3) as usize;
            let pattern = match rng.below(4) {
                0 => format!("{}%", &city[..cut]),
                1 => format!("%{}", &city[city.len() - cut..]),
                2 => format!("%{}%", &city[1..1 + cut]),
                _ => city.to_string(),
            };
            Cond::Like(if rng.below(2) == 0 { "city" } else { "id" }, pattern)
        }
        5 => Cond::NotNull(column),
        6 => Cond::Not(Box::new(random_cond(rng, depth - 1))),
        7 => Cond::And(
            Box::new(random_cond(rng, depth - 1)),
            Box::new(random_cond(rng, depth - 1)),
        ),
        _ => Cond::Or(
            Box::new(random_cond(rng, depth - 1)),
            Box::new(random_cond(rng, depth - 1)),
        ),
    }
}

fn render(cond: &Cond) -> String {
    match cond {
        Cond::Cmp(c, op, v) => format!("{c} {op} {}", v.sql()),
        Cond::Between(c, a, b, not) => format!(
            "{c} {}BETWEEN {} AND {}",
            if *not { "NOT " } else { "" },
            a.sql(),
            b.sql()
        ),
        Cond::In(c, vs, not) => format!(
            "{c} {}IN ({})",
            if *not { "NOT " } else { "" },
            vs.iter().map(Lit::sql).collect::<Vec<_>>().join(", ")
        ),
        Cond::Like(c, p) => format!("{c} LIKE {}", quote(p)),
        Cond::NotNull(c) => format!("{c} IS NOT NULL"),
        Cond::Not(inner) => format!("NOT ({})", render(inner)),
        Cond::And(a, b) => format!("({}) AND ({})", render(a), render(b)),
        Cond::Or(a, b) => format!("({}) OR ({})", render(a), render(b)),
    }
}

/// SQL three-valued logic: `None` is unknown.
fn eval(cond: &Cond, row: &Row) -> Option<bool> {
    use std::cmp::Ordering;
    let value = |c: &str| -> Option<Lit> {
        match c {
            "id" => Some(Lit::Text(row.id.clone())),
            "city" => row.city.clone().map(Lit::Text),
            "price" => row.price.map(Lit::Int),
            "score" => row.score.map(Lit::Float),
            _ => row.active.map(Lit::Bool),
        }
    };
    let cmp = |a: &Lit, b: &Lit| -> Ordering {
        match (a, b) {
            (Lit::Text(x), Lit::Text(y)) => x.as_bytes().cmp(y.as_bytes()),
            (Lit::Int(x), Lit::Int(y)) => x.cmp(y),
            (Lit::Float(x), Lit::Float(y)) => x.partial_cmp(y).unwrap(),
            (Lit::Bool(x), Lit::Bool(y)) => x.cmp(y),
            _ => panic!("type mismatch in the test"),
        }
    };
    match cond {
        Cond::Cmp(c, op, v) => value(c).map(|x| {
            let o = cmp(&x, v);
            match *op {
                "=" => o == Ordering::Equal,
                "<>" => o != Ordering::Equal,
                "<" => o == Ordering::Less,
                "<=" => o != Ordering::Greater,
                ">" => o == Ordering::Greater,
                _ => o != Ordering::Less,
            }
        }),
        Cond::Between(c, a, b, not) => value(c).map(|x| {
            let inside = cmp(&x, a) != Ordering::Less && cmp(&x, b) != Ordering::Greater;
            inside != *not
        }),
        Cond::In(c, vs, not) => value(c).map(|x| {
            let found = vs.iter().any(|v| cmp(&x, v) == Ordering::Equal);
            found != *not
        }),
        Cond::Like(c, p) => value(c).map(|x| {
            let Lit::Text(s) = x else { panic!() };
            let core = p.trim_matches('%');
            match (p.starts_with('%'), p.ends_with('%') && p.len() > 1) {
                (false, false) => s == *p,
                (false, true) => s.starts_with(core),
                (true, false) => s.ends_with(core),
                (true, true) => s.contains(core),
            }
        }),
        Cond::NotNull(c) => Some(value(c).is_some()),
        Cond::Not(inner) => eval(inner, row).map(|b| !b),
        Cond::And(a, b) => match (eval(a, row), eval(b, row)) {
            (Some(false), _) | (_, Some(false)) => Some(false),
            (Some(true), Some(true)) => Some(true),
            _ => None,
        },
        Cond::Or(a, b) => match (eval(a, row), eval(b, row)) {
            (Some(true), _) | (_, Some(true)) => Some(true),
            (Some(false), Some(false)) => Some(false),
            _ => None,
        },
    }
}

fn create(db: &Database) {
    db.execute_sql(
        "CREATE TABLE listings (id TEXT PRIMARY KEY, city TEXT, price INT, score FLOAT, active BOOLEAN)",
    )
    .unwrap();
}

fn keys_of(answer: Answer) -> Vec<String> {
    match answer {
        Answer::Rows { rows, .. } => rows
            .into_iter()
            .map(|r| String::from_utf8(r.key).unwrap())
            .collect(),
        other => panic!("expected rows, got {other:?}"),
    }
}

fn options() -> ShardOptions {
    ShardOptions {
        background: false,
        ..ShardOptions::default()
    }
}

#[test]
fn random_where_clauses_match_a_scan() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), options()).unwrap();
    create(&db);
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let rows: Vec<Row> = (0..300).map(|i| random_row(&mut rng, i)).collect();
    for chunk in rows.chunks(100) {
        db.execute_sql(&insert_sql(chunk)).unwrap();
    }
    for phase in ["log stage", "compressed"] {
        if phase == "compressed" {
            db.table("listings").unwrap().compact_all().unwrap();
        }
        for _ in 0..300 {
            let cond = random_cond(&mut rng, 3);
            let where_sql = render(&cond);
            let expected: Vec<String> = rows
                .iter()
                .filter(|r| eval(&cond, r) == Some(true))
                .map(|r| r.id.clone())
                .collect();
            let sql = format!("SELECT id FROM listings WHERE {where_sql}");
            let got = keys_of(
                db.execute_sql(&sql)
                    .unwrap_or_else(|e| panic!("{sql}: {e}")),
            );
            assert_eq!(got, expected, "{phase}: {sql}");
            let count_sql = format!("SELECT COUNT(*) FROM listings WHERE {where_sql} FRESHNESS 0");
            match db.execute_sql(&count_sql).unwrap() {
                Answer::Count { count, .. } => {
                    assert_eq!(count, expected.len() as u64, "{phase}: {count_sql}")
                }
                other => panic!("{other:?}"),
            }
        }
    }
}

#[test]
fn statements_round_trip_through_the_database() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Database::open(dir.path(), options()).unwrap();
        create(&db);
        db.execute_sql("INSERT INTO listings (id, city, price) VALUES ('a', 'Boston', 10), ('b', 'Dublin', -5)")
            .unwrap();
        db.execute_sql("DELETE FROM listings WHERE id = 'a'")
            .unwrap();
        assert!(matches!(
            db.execute_sql("SHOW TABLES").unwrap(),
            Answer::Tables(t) if t == vec!["listings".to_string()]
        ));
    }
    let db = Database::open(dir.path(), options()).unwrap();
    let Answer::Rows { rows, columns, .. } =
        db.execute_sql("SELECT * FROM listings LIMIT 10").unwrap()
    else {
        panic!()
    };
    assert_eq!(columns, ["id", "city", "price", "score", "active"]);
    let expected = Record::new("b")
        .with("city", Value::str("Dublin"))
        .with("price", Value::Int(-5));
    assert_eq!(rows, vec![expected]);
    let Answer::Described { schema, subspaces } = db.execute_sql("DESCRIBE listings").unwrap()
    else {
        panic!()
    };
    assert_eq!(schema.key, "id");
    assert_eq!(schema.attributes.len(), 4);
    assert!(subspaces.is_empty());
    // Subspaces: added, described, answering, dropped.
    let added = db
        .execute_sql("ALTER TABLE listings ADD SUBSPACE (city, price) REGIONS 9")
        .unwrap();
    assert_eq!(added, Answer::Created("listings__ss1".into()));
    db.execute_sql("alter table listings add subspace (score)")
        .unwrap();
    let Answer::Described { subspaces, .. } = db.execute_sql("DESCRIBE listings").unwrap() else {
        panic!()
    };
    let shown: Vec<String> = subspaces
        .iter()
        .map(|s| {
            format!(
                "{} {:?} parts {:?} regions {} ready {}",
                s.name, s.attributes, s.parts, s.regions, s.ready
            )
        })
        .collect();
    assert_eq!(
        shown,
        vec![
            r#"listings__ss1 ["city", "price"] parts [3, 3] regions 9 ready true"#,
            r#"listings__ss2 ["score"] parts [16] regions 16 ready true"#,
        ]
    );
    let Answer::Rows { rows, .. } = db
        .execute_sql("SELECT id FROM listings WHERE city = 'Dublin' AND price < 0")
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(rows, vec![Record::new("b")]);
    for (bad, says) in [
        ("ALTER TABLE listings ADD SUBSPACE city", "parentheses"),
        (
            "ALTER TABLE listings ADD SUBSPACE (city REGIONS 4",
            ", or )",
        ),
        (
            "ALTER TABLE listings ADD SUBSPACE (city) REGIONS many",
            "takes a number",
        ),
        (
            "ALTER TABLE listings ADD SUBSPACE (city) REGIONS 4 now",
            "unexpected words",
        ),
        (
            "ALTER TABLE listings DROP SUBSPACE listings__ss1 now",
            "nothing after",
        ),
        (
            "ALTER TABLE listings MOVE SUBSPACE listings__ss1",
            "ADD SUBSPACE",
        ),
        (
            "ALTER TABLE listings DROP SUBSPACE listings",
            "not a subspace",
        ),
        ("ALTER TABLE listings ADD SUBSPACE (nope)", "no attribute"),
    ] {
        let error = db.execute_sql(bad).unwrap_err().to_string();
        assert!(error.contains(says), "{bad}: {error:?} should say {says:?}");
    }
    assert_eq!(
        db.execute_sql("ALTER TABLE listings DROP SUBSPACE listings__ss1")
            .unwrap(),
        Answer::Dropped("listings__ss1".into())
    );
    let Answer::Described { subspaces, .. } = db.execute_sql("DESCRIBE listings").unwrap() else {
        panic!()
    };
    assert_eq!(subspaces.len(), 1);
    db.execute_sql("DROP TABLE listings").unwrap();
    assert!(db.subspaces_of("listings").is_empty());
    assert!(db.table("listings__ss2").is_err());
    assert!(matches!(
        db.execute_sql("SELECT * FROM listings"),
        Err(QueryError::UnknownTable(_))
    ));
}

#[test]
fn constructs_outside_the_subset_are_named_with_their_position() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), options()).unwrap();
    create(&db);
    let cases = [
        ("SELECT id FROM listings ORDER BY price", "ORDER BY"),
        ("SELECT id FROM listings GROUP BY city", "GROUP BY"),
        ("SELECT DISTINCT city FROM listings", "DISTINCT"),
        (
            "SELECT id FROM listings WHERE city LIKE '%a%b%'",
            "LIKE pattern",
        ),
        ("SELECT id FROM listings WHERE price + 1 = 3", "comparison"),
        (
            "SELECT id FROM listings WHERE city LIKE 'a_b'",
            "LIKE pattern",
        ),
        (
            "SELECT id FROM listings FRESHNESS 5 WHERE price = 1",
            "FRESHNESS",
        ),
        ("UPDATE listings SET price = 1", "UPDATE"),
    ];
    for (sql, construct) in cases {
        match db.execute_sql(sql) {
            Err(QueryError::Unsupported {
                construct: named,
                line,
                column,
            }) => {
                assert!(named.contains(construct), "{sql}: named {named:?}");
                assert!(line >= 1 && column >= 1, "{sql}: position {line}:{column}");
            }
            other => panic!("{sql}: expected an unsupported error, got {other:?}"),
        }
    }
    match db.execute_sql("SELECT id FROM listings WHERE") {
        Err(QueryError::Syntax { line, column, .. }) => assert!(line == 1 && column > 1),
        other => panic!("expected a syntax error, got {other:?}"),
    }
    let deep = format!(
        "SELECT id FROM listings WHERE {}price = 1{}",
        "(".repeat(500),
        ")".repeat(500)
    );
    assert!(
        matches!(db.execute_sql(&deep), Err(QueryError::Limit(_))),
        "deep nesting"
    );
    let huge = format!(
        "SELECT id FROM listings WHERE city = '{}'",
        "x".repeat(2 << 20)
    );
    assert!(
        matches!(db.execute_sql(&huge), Err(QueryError::Limit(_))),
        "huge input"
    );
    let typed = db.execute_sql("SELECT id FROM listings WHERE price = 'cheap'");
    assert!(matches!(typed, Err(QueryError::Invalid(_))), "{typed:?}");
    let unknown = db.execute_sql("SELECT nope FROM listings");
    assert!(matches!(unknown, Err(QueryError::Invalid(m)) if m.contains("nope")));
}

#[test]
fn freshness_is_passed_to_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), options()).unwrap();
    create(&db);
    db.execute_sql("INSERT INTO listings (id, price) VALUES ('a', 1)")
        .unwrap();
    let shard = db.table("listings").unwrap();
    shard.seal().unwrap();
    db.execute_sql("INSERT INTO listings (id, price) VALUES ('b', 2)")
        .unwrap();
    // A loose bound may skip the log stage, which holds 'b'; a zero bound may not.
    let count = |sql: &str| match db.execute_sql(sql).unwrap() {
        Answer::Count { count, snapshot } => (count, snapshot.snapshot, snapshot.read_log),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        count("SELECT COUNT(*) FROM listings FRESHNESS 0"),
        (2, 2, true)
    );
    assert_eq!(
        count("SELECT COUNT(*) FROM listings FRESHNESS 3600;"),
        (1, 1, false)
    );
}
