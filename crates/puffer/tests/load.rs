//! End-to-end tests of `puffer load`: files written here are loaded with the binary,
//! then queried with `puffer sql`, and every answer is checked against the rows the test
//! wrote (the oracle).

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};
use tempfile::TempDir;

use common::ServeProcess;

fn puffer(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_puffer"))
        .args(args)
        .output()
        .expect("cannot run the puffer binary")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Runs `puffer load` and asserts it succeeded; returns its stdout.
fn load_ok(args: &[&str]) -> String {
    let output = puffer(&[&["load"], args].concat());
    assert!(
        output.status.success(),
        "puffer load {args:?} failed: {}",
        stderr(&output)
    );
    stdout(&output)
}

/// Runs `puffer load` and asserts it failed; returns its stderr.
fn load_fails(args: &[&str]) -> String {
    let output = puffer(&[&["load"], args].concat());
    assert!(
        !output.status.success(),
        "puffer load {args:?} should fail; printed {}",
        stdout(&output)
    );
    stderr(&output)
}

/// `puffer sql -e QUERY --json` against a data directory (`--data DIR`) or a server
/// (`--url URL`).
fn sql(target: &[&str], query: &str) -> Value {
    let output = puffer(&[&["sql"], target, &["-e", query, "--json"]].concat());
    assert!(output.status.success(), "{query}: {}", stderr(&output));
    serde_json::from_str(stdout(&output).trim()).expect("JSON answer")
}

fn count(target: &[&str], table: &str, condition: &str) -> u64 {
    let where_clause = if condition.is_empty() {
        String::new()
    } else {
        format!(" WHERE {condition}")
    };
    let answer = sql(
        target,
        &format!("SELECT COUNT(*) FROM {table}{where_clause}"),
    );
    answer["count"].as_u64().expect("a count")
}

fn ids(target: &[&str], table: &str, condition: &str) -> BTreeSet<String> {
    let answer = sql(
        target,
        &format!("SELECT id FROM {table} WHERE {condition} LIMIT 10000"),
    );
    let rows = answer["rows"].as_array().expect("rows");
    rows.iter()
        .map(|row| row["id"].as_str().expect("an id").to_string())
        .collect()
}

// ---------------------------------------------------------------------------------
// The data: rows written to a CSV file and a JSON Lines file, kept as the oracle.

const NAMES: &[&str] = &["puffer", "fish", "coral reef", "sea, salt", "banana"];

#[derive(Clone, Debug)]
struct Item {
    id: String,
    name: &'static str,
    price: i64,
    rating: Option<f64>,
    in_stock: bool,
    /// (month, day, hour) in 2024, UTC.
    added: (u32, u32, u32),
    /// Only the JSON Lines file has this column.
    note: Option<String>,
}

impl Item {
    fn new(i: usize) -> Item {
        let jsonl = i >= CSV_ROWS;
        Item {
            id: format!("k{i}"),
            name: NAMES[(i * 7) % NAMES.len()],
            price: ((i * 37) % 101) as i64,
            rating: (!i.is_multiple_of(4)).then(|| ((i * 13) % 9) as f64 / 2.0),
            in_stock: (i * 5).is_multiple_of(3),
            added: if jsonl {
                (2, (i % 28) as u32 + 1, (i % 24) as u32)
            } else {
                (1, (i % 28) as u32 + 1, 0)
            },
            note: (jsonl && i.is_multiple_of(2)).then(|| format!("note \"{i}\"\nsecond line")),
        }
    }
}

const CSV_ROWS: usize = 40;
const ROWS: usize = 60;

fn items() -> Vec<Item> {
    (0..ROWS).map(Item::new).collect()
}

fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

fn write_csv(path: &Path, items: &[Item]) {
    let mut text = String::from("id,name,price,rating,in_stock,added\n");
    for item in items {
        let (month, day, _) = item.added;
        text += &format!(
            "{},{},{},{},{},2024-{month:02}-{day:02}\n",
            item.id,
            csv_field(item.name),
            item.price,
            item.rating
                .map_or("NULL".to_string(), |r| format!("{r:.1}")),
            if item.in_stock { "t" } else { "f" },
        );
    }
    std::fs::write(path, text).unwrap();
}

fn write_jsonl(path: &Path, items: &[Item]) {
    let mut text = String::new();
    for item in items {
        let (month, day, hour) = item.added;
        let object = json!({
            "id": item.id,
            "name": item.name,
            "price": item.price,
            "rating": item.rating,
            "in_stock": item.in_stock,
            "added": format!("2024-{month:02}-{day:02}T{hour:02}:00:00Z"),
            "note": item.note,
        });
        text += &format!("{object}\n");
    }
    std::fs::write(path, text).unwrap();
}

struct Fixture {
    dir: TempDir,
    items: Vec<Item>,
    csv: PathBuf,
    jsonl: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let items = items();
        let csv = dir.path().join("items.csv");
        let jsonl = dir.path().join("more.jsonl");
        write_csv(&csv, &items[..CSV_ROWS]);
        write_jsonl(&jsonl, &items[CSV_ROWS..]);
        Fixture {
            dir,
            items,
            csv,
            jsonl,
        }
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    fn write(&self, name: &str, contents: &[u8]) -> String {
        std::fs::write(self.dir.path().join(name), contents).unwrap();
        self.path(name)
    }

    fn files(&self) -> [String; 2] {
        [
            self.csv.display().to_string(),
            self.jsonl.display().to_string(),
        ]
    }

    fn oracle(&self, keep: impl Fn(&Item) -> bool) -> BTreeSet<String> {
        self.items
            .iter()
            .filter(|item| keep(item))
            .map(|item| item.id.clone())
            .collect()
    }
}

/// Checks every query against the oracle.
fn check_against_oracle(target: &[&str], fixture: &Fixture) {
    assert_eq!(count(target, "t", ""), ROWS as u64);
    type Check = (&'static str, Box<dyn Fn(&Item) -> bool>);
    let checks: Vec<Check> = vec![
        ("price > 50", Box::new(|i| i.price > 50)),
        ("name = 'sea, salt'", Box::new(|i| i.name == "sea, salt")),
        ("name LIKE 'co%'", Box::new(|i| i.name.starts_with("co"))),
        ("in_stock = true", Box::new(|i| i.in_stock)),
        (
            "rating < 2.5",
            Box::new(|i| i.rating.is_some_and(|r| r < 2.5)),
        ),
        ("rating IS NOT NULL", Box::new(|i| i.rating.is_some())),
        ("added >= '2024-01-15'", Box::new(|i| i.added >= (1, 15, 0))),
        (
            "added > '2024-02-10T05:00:00Z'",
            Box::new(|i| i.added > (2, 10, 5)),
        ),
        ("note IS NOT NULL", Box::new(|i| i.note.is_some())),
        (
            "price <= 30 AND in_stock = false",
            Box::new(|i| i.price <= 30 && !i.in_stock),
        ),
    ];
    for (condition, keep) in &checks {
        let expected = fixture.oracle(keep);
        assert!(
            !expected.is_empty() && expected.len() < ROWS,
            "{condition} selects {} rows: a weak check",
            expected.len()
        );
        assert_eq!(
            count(target, "t", condition),
            expected.len() as u64,
            "COUNT WHERE {condition}"
        );
        assert_eq!(ids(target, "t", condition), expected, "WHERE {condition}");
    }
    // One whole record of each file, typed.
    for item in [&fixture.items[3], &fixture.items[CSV_ROWS + 2]] {
        let answer = sql(target, &format!("SELECT * FROM t WHERE id = '{}'", item.id));
        let row = &answer["rows"][0];
        assert_eq!(row["name"], json!(item.name));
        assert_eq!(row["price"], json!(item.price));
        assert_eq!(row["rating"], item.rating.map_or(Value::Null, |r| json!(r)));
        assert_eq!(row["in_stock"], json!(item.in_stock));
        let (month, day, hour) = item.added;
        let added = format!("2024-{month:02}-{day:02}T{hour:02}:00:00Z");
        assert_eq!(row["added"], json!(added));
        assert_eq!(
            row["note"],
            item.note.as_ref().map_or(Value::Null, |n| json!(n))
        );
    }
}

// ---------------------------------------------------------------------------------
// Tests.

#[test]
fn csv_and_jsonl_load_as_one_typed_table() {
    let fixture = Fixture::new();
    let data = fixture.data();
    let [csv, jsonl] = fixture.files();
    let printed = load_ok(&[
        "t",
        &csv,
        &jsonl,
        "--key",
        "id",
        "--batch-rows",
        "7",
        "--data",
        &data,
    ]);
    assert!(
        printed.contains("loaded 60 rows into t") && printed.contains("9 batches"),
        "{printed}"
    );
    assert!(
        printed.contains("table created") && printed.contains("rows/s"),
        "{printed}"
    );

    let target = ["--data", data.as_str()];
    let schema = sql(&target, "DESCRIBE t");
    assert_eq!(schema["key"], json!("id"));
    assert_eq!(
        schema["attributes"],
        json!([
            {"name": "name", "type": "string"},
            {"name": "price", "type": "int"},
            {"name": "rating", "type": "float"},
            {"name": "in_stock", "type": "bool"},
            {"name": "added", "type": "timestamp"},
            {"name": "note", "type": "string"},
        ])
    );
    check_against_oracle(&target, &fixture);

    // A query beyond the subset, through `puffer sql --data`: the analytics engine.
    let answer = sql(&target, "SELECT in_stock, COUNT(*) AS n, SUM(price) AS total FROM t GROUP BY in_stock ORDER BY in_stock");
    let mut expected = [(false, 0u64, 0i64), (true, 0, 0)];
    for item in items() {
        let group = &mut expected[usize::from(item.in_stock)];
        group.1 += 1;
        group.2 += item.price;
    }
    let expected: Vec<Value> = expected
        .iter()
        .map(|(in_stock, n, total)| json!({"in_stock": in_stock, "n": n, "total": total}))
        .collect();
    assert_eq!(answer["rows"], json!(expected), "{answer}");
}

#[test]
fn loading_again_replaces_rows_instead_of_duplicating_them() {
    let fixture = Fixture::new();
    let data = fixture.data();
    let target = ["--data", data.as_str()];
    let [csv, jsonl] = fixture.files();
    load_ok(&["t", &csv, &jsonl, "--key", "id", "--data", &data]);
    assert_eq!(count(&target, "t", ""), ROWS as u64);
    let printed = load_ok(&["t", &csv, &jsonl, "--key", "id", "--data", &data]);
    assert!(!printed.contains("table created"), "{printed}");
    assert_eq!(count(&target, "t", ""), ROWS as u64);
    check_against_oracle(&target, &fixture);

    // A changed file replaces the rows it has; the others stay.
    let mut changed = fixture.items[..CSV_ROWS].to_vec();
    changed[3].price = 999;
    write_csv(&fixture.csv, &changed);
    load_ok(&["t", &csv, "--key", "id", "--data", &data]);
    assert_eq!(count(&target, "t", ""), ROWS as u64);
    assert_eq!(
        ids(&target, "t", "price = 999"),
        BTreeSet::from(["k3".to_string()])
    );

    // Row-number keys: the same files in the same order give the same keys.
    load_ok(&["r", &csv, "--key-row-number", "--data", &data]);
    load_ok(&["r", &csv, "--key-row-number", "--data", &data]);
    assert_eq!(count(&target, "r", ""), CSV_ROWS as u64);
}

#[test]
fn a_bad_file_fails_naming_it_and_loads_nothing() {
    let fixture = Fixture::new();
    let data = fixture.data();
    let target = ["--data", data.as_str()];
    let [csv, _] = fixture.files();

    let ragged = fixture.write("ragged.csv", b"id,a,b\nx,1,2\ny,3\n");
    let message = load_fails(&["t", &csv, &ragged, "--key", "id", "--data", &data]);
    assert!(message.contains("ragged.csv line 3"), "{message}");

    let text = fixture.write("items.txt", b"id\nx\n");
    let message = load_fails(&["t", &text, "--key", "id", "--data", &data]);
    assert!(message.contains("items.txt"), "{message}");

    let gzip = fixture.write("items.csv.gz", b"id\nnot gzip\n");
    let message = load_fails(&["t", &gzip, "--key", "id", "--data", &data]);
    assert!(
        message.contains("items.csv.gz") && message.contains("gzip"),
        "{message}"
    );

    let missing = fixture.path("missing.jsonl");
    let message = load_fails(&["t", &missing, "--key", "id", "--data", &data]);
    assert!(message.contains("missing.jsonl"), "{message}");

    let bad_json = fixture.write("bad.jsonl", b"{\"id\": \"a\"}\n{\"id\": \"b\",\n");
    let message = load_fails(&["t", &bad_json, "--key", "id", "--data", &data]);
    assert!(message.contains("bad.jsonl line 2"), "{message}");

    let empty_key = fixture.write("keys.csv", b"id,a\nx,1\n,2\n");
    let message = load_fails(&["t", &empty_key, "--key", "id", "--data", &data]);
    assert!(
        message.contains("keys.csv line 3") && message.contains("empty"),
        "{message}"
    );

    let repeated = fixture.write("repeated.csv", b"id,a\nx,1\nx,2\n");
    let message = load_fails(&["t", &repeated, "--key", "id", "--data", &data]);
    assert!(
        message.contains("repeated.csv line 3") && message.contains("repeats"),
        "{message}"
    );

    // Files are read before anything is written: no table was created.
    assert_eq!(sql(&target, "SHOW TABLES")["tables"], json!([]));
}

#[test]
fn an_existing_table_keeps_its_types_and_refuses_unknown_columns() {
    let fixture = Fixture::new();
    let data = fixture.data();
    let target = ["--data", data.as_str()];
    let first = fixture.write("first.csv", b"id,code,amount\na,x07,1.5\n");
    load_ok(&["t", &first, "--key", "id", "--data", &data]);

    // "12" would be inferred an int; the table's column is a string.
    let more = fixture.write("more.csv", b"id,code,amount\nb,12,2\n");
    load_ok(&["t", &more, "--key", "id", "--data", &data]);
    assert_eq!(
        ids(&target, "t", "code = '12'"),
        BTreeSet::from(["b".to_string()])
    );
    assert_eq!(
        ids(&target, "t", "amount >= 2.0"),
        BTreeSet::from(["b".to_string()])
    );

    let wrong_type = fixture.write("wrong.csv", b"id,amount\nc,lots\n");
    let message = load_fails(&["t", &wrong_type, "--key", "id", "--data", &data]);
    assert!(
        message.contains("wrong.csv line 2") && message.contains("\"amount\""),
        "{message}"
    );

    let extra = fixture.write("extra.jsonl", b"{\"id\": \"d\", \"colour\": \"red\"}\n");
    let message = load_fails(&["t", &extra, "--key", "id", "--data", &data]);
    assert!(
        message.contains("\"colour\"") && message.contains("extra.jsonl"),
        "{message}"
    );
    let message = load_fails(&["t", &extra, "--key-row-number", "--data", &data]);
    assert!(message.contains("key"), "{message}");
    assert_eq!(count(&target, "t", ""), 2);

    let printed = load_ok(&["t", &extra, "--key", "id", "--add-columns", "--data", &data]);
    assert!(printed.contains("columns added: colour"), "{printed}");
    assert_eq!(
        ids(&target, "t", "colour = 'red'"),
        BTreeSet::from(["d".to_string()])
    );
}

#[test]
fn loading_through_a_server() {
    let fixture = Fixture::new();
    let server = ServeProcess::start_on(Path::new(&fixture.data()), &[], &[]);
    let url = server.base.as_str();
    let [csv, jsonl] = fixture.files();
    let printed = load_ok(&[
        "t",
        &csv,
        &jsonl,
        "--key",
        "id",
        "--batch-rows",
        "16",
        "--url",
        url,
    ]);
    assert!(printed.contains("loaded 60 rows into t"), "{printed}");
    load_ok(&["t", &csv, &jsonl, "--key", "id", "--url", url]);
    let target = ["--url", url];
    check_against_oracle(&target, &fixture);

    let extra = fixture.write("extra.jsonl", b"{\"id\": \"d\", \"colour\": \"red\"}\n");
    let message = load_fails(&["t", &extra, "--key", "id", "--add-columns", "--url", url]);
    assert!(message.contains("--data"), "{message}");
    assert_eq!(count(&target, "t", ""), ROWS as u64);
}

/// One HTTP request as the fake server saw it.
struct Request {
    line: String,
    body: Value,
}

/// Reads one request (headers, then a Content-Length body).
fn read_request(stream: &mut impl Read) -> Request {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let mut length = 0;
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).unwrap();
        let header = header.trim();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap();
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    Request {
        line: line.trim().to_string(),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    }
}

#[test]
fn overloaded_batches_wait_and_retry() {
    // A fake server: no table yet, creation succeeds, the first batch is refused with 429.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut refused = false;
        // GET, create, 429, then two batches.
        for _ in 0..5 {
            let (mut stream, _) = listener.accept().unwrap();
            let request = read_request(&mut stream);
            let (status, extra, body) = match request.line.as_str() {
                l if l.starts_with("GET /v1/tables/t ") => (
                    "404 Not Found",
                    "",
                    json!({"code": "unknown_table", "message": "unknown table", "retryable": false}),
                ),
                l if l.starts_with("POST /v1/tables ") => ("201 Created", "", json!({"name": "t"})),
                l if l.starts_with("POST /v1/tables/t/records ") && !refused => {
                    refused = true;
                    (
                        "429 Too Many Requests",
                        "Retry-After: 0\r\n",
                        json!({"code": "overloaded", "message": "busy", "retryable": true}),
                    )
                }
                _ => ("200 OK", "", json!({"seq": 1, "operations": 1})),
            };
            let body = body.to_string();
            write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{extra}\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            seen.push(request);
        }
        seen
    });
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.csv");
    std::fs::write(
        &file,
        "id,n,when,ok\na,1,1970-01-01T00:00:01Z,t\nb,2.5,,f\nc,,,\n",
    )
    .unwrap();
    let printed = load_ok(&[
        "t",
        &file.display().to_string(),
        "--key",
        "id",
        "--batch-rows",
        "2",
        "--url",
        &url,
    ]);
    assert!(printed.contains("1 retry while overloaded"), "{printed}");
    let seen = server.join().unwrap();
    let lines: Vec<&str> = seen.iter().map(|r| r.line.as_str()).collect();
    assert!(lines[0].starts_with("GET /v1/tables/t "), "{lines:?}");
    assert!(lines[1].starts_with("POST /v1/tables "), "{lines:?}");
    assert_eq!(
        seen[1].body,
        json!({"name": "t", "key": "id", "attributes": [
            {"name": "n", "type": "float"},
            {"name": "when", "type": "timestamp"},
            {"name": "ok", "type": "bool"},
        ]})
    );
    // The refused batch is sent again, unchanged; timestamps go as microseconds.
    let first_batch = json!([
        {"id": "a", "n": 1.0, "when": 1_000_000, "ok": true},
        {"id": "b", "n": 2.5, "ok": false},
    ]);
    assert_eq!(seen[2].body, first_batch);
    assert_eq!(seen[3].body, first_batch);
    assert_eq!(seen[4].body, json!([{"id": "c"}]));
}

#[test]
fn statements_piped_to_the_shell_run_one_per_line() {
    use std::io::Write as _;
    let fixture = Fixture::new();
    let data = fixture.data();
    let [csv, _] = fixture.files();
    load_ok(&["t", &csv, "--key", "id", "--data", &data]);
    let expected = count(&["--data", data.as_str()], "t", "price > 10");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_puffer"))
        .args(["sql", "--data", &data, "--json"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"SELECT COUNT(*) FROM t WHERE price > 10;\n\nSELECT COUNT(*) FROM t\n")
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let answers: Vec<Value> = stdout(&output)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert_eq!(answers[0]["count"], json!(expected));
    let total = count(&["--data", data.as_str()], "t", "id IS NOT NULL");
    assert_eq!(answers[1]["count"], json!(total));
}

// ---------------------------------------------------------------------------------
// Files larger than the loader's memory bound.

/// The loader's memory beyond the program, as `puffer load --help` states it.
const LOADER_BOUND_BYTES: u64 = 30 << 20;
/// Size of the generated large files.
const LARGE_FILE_BYTES: u64 = 100 << 20;

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

/// Dense row `i` of the large CSV file, and the record the API should receive for it.
fn dense_row(i: usize) -> (String, Value) {
    let name = NAMES[i % NAMES.len()];
    let price = ((i * 37) % 1001) as i64;
    let rating = (!i.is_multiple_of(4)).then(|| ((i * 13) % 9) as f64 / 2.0);
    let note = format!(
        "{} {} reef {} tide {i}",
        NAMES[(i * 3) % NAMES.len()],
        NAMES[(i * 7) % NAMES.len()],
        i % 977
    );
    let line = format!(
        "k{i},{},{price},{},{}\n",
        csv_field(name),
        rating.map_or(String::new(), |r| r.to_string()),
        csv_field(&note)
    );
    let mut record = json!({"id": format!("k{i}"), "name": name, "price": price, "note": note});
    if let Some(rating) = rating {
        record["rating"] = json!(rating);
    }
    (line, record)
}

/// Writes dense rows until the file holds `bytes`; returns the number of rows.
fn write_dense_csv(path: &Path, bytes: u64) -> usize {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    file.write_all(b"id,name,price,rating,note\n").unwrap();
    let mut written = 0;
    let mut rows = 0;
    while written < bytes {
        let (line, _) = dense_row(rows);
        file.write_all(line.as_bytes()).unwrap();
        written += line.len() as u64;
        rows += 1;
    }
    file.flush().unwrap();
    rows
}

/// What the fake server received.
#[derive(Default)]
struct Received {
    schema: Value,
    batches: usize,
    largest_batch_rows: usize,
    /// Whether row `i` arrived (each must arrive once).
    seen: Vec<bool>,
}

/// A fake server that takes a table's creation and its batches, checking every record
/// against `dense_row`, until a `GET /stop`.
fn dense_sink(listener: TcpListener, rows: usize) -> std::thread::JoinHandle<Received> {
    std::thread::spawn(move || {
        let mut received = Received {
            seen: vec![false; rows],
            ..Received::default()
        };
        loop {
            let (mut stream, _) = listener.accept().unwrap();
            let request = read_request(&mut stream);
            let line = request.line.as_str();
            let (status, body) = if line.starts_with("GET /stop ") {
                break;
            } else if line.starts_with("GET /v1/tables/t ") {
                (
                    "404 Not Found",
                    json!({"code": "unknown_table", "message": "no"}),
                )
            } else if line.starts_with("POST /v1/tables ") {
                received.schema = request.body;
                ("201 Created", json!({"name": "t"}))
            } else if line.starts_with("POST /v1/tables/t/records ") {
                let records = request.body.as_array().expect("a batch is an array");
                received.batches += 1;
                received.largest_batch_rows = received.largest_batch_rows.max(records.len());
                for record in records {
                    let id = record["id"].as_str().expect("an id");
                    let i: usize = id[1..].parse().expect("a generated id");
                    assert!(!received.seen[i], "{id} arrived twice");
                    received.seen[i] = true;
                    assert_eq!(record, &dense_row(i).1, "record {id}");
                }
                ("200 OK", json!({"seq": 1, "operations": records.len()}))
            } else {
                panic!("unexpected request {line}");
            };
            let body = body.to_string();
            write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
        }
        received
    })
}

#[test]
fn a_file_far_larger_than_the_memory_bound_streams_to_a_server() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("large.csv");
    let rows = write_dense_csv(&path, LARGE_FILE_BYTES);
    let file_bytes = std::fs::metadata(&path).unwrap().len();

    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let sink = dense_sink(listener, rows);
    let (output, peak_rss_bytes) =
        common::output_and_peak_rss_bytes(Command::new(env!("CARGO_BIN_EXE_puffer")).args([
            "load",
            "t",
            &path.display().to_string(),
            "--key",
            "id",
            "--batch-rows",
            "500",
            "--url",
            &url,
        ]));
    // Stops the fake server (which may have stopped already, failing a check).
    let _ = std::net::TcpStream::connect(url.trim_start_matches("http://"))
        .and_then(|mut stream| stream.write_all(b"GET /stop HTTP/1.1\r\n\r\n"));
    let received = sink.join().expect("the fake server checked every record");
    assert!(output.status.success(), "{}", stderr(&output));
    eprintln!(
        "loaded {rows} rows from {:.1} MiB over HTTP: peak RSS {:.1} MiB",
        mib(file_bytes),
        mib(peak_rss_bytes)
    );
    assert!(
        stdout(&output).contains(&format!("loaded {rows} rows into t")),
        "{}",
        stdout(&output)
    );
    // Every row arrived once, as generated, in batches of at most 500 rows.
    assert!(received.seen.iter().all(|&seen| seen), "rows are missing");
    assert_eq!(received.batches, rows.div_ceil(500));
    assert_eq!(received.largest_batch_rows, 500);
    assert_eq!(
        received.schema["attributes"],
        json!([
            {"name": "name", "type": "string"},
            {"name": "price", "type": "int"},
            {"name": "rating", "type": "float"},
            {"name": "note", "type": "string"},
        ])
    );
    // The file is several times the bound; the process (the program's own 6-7 MiB
    // included) stays under 60 MiB, far below the file.
    assert!(file_bytes > 3 * LOADER_BOUND_BYTES);
    assert!(
        peak_rss_bytes < 60 << 20,
        "peak RSS {:.1} MiB loading a {:.1} MiB file",
        mib(peak_rss_bytes),
        mib(file_bytes)
    );
}

/// Columns of the sparse file: most cells of a row are NULL.
const SPARSE_COLUMNS: usize = 240;

/// The present cells of sparse row `i`: (column, text); even columns hold ints.
fn sparse_cells(i: usize) -> Vec<(usize, String)> {
    let mut columns = vec![i % SPARSE_COLUMNS, (i * 7 + 3) % SPARSE_COLUMNS];
    columns.dedup();
    columns
        .into_iter()
        .map(|c| {
            let text = if c % 2 == 0 {
                (i * c).to_string()
            } else {
                format!("v{i}")
            };
            (c, text)
        })
        .collect()
}

/// Writes the sparse rows as a CSV file of at least `bytes` (NULL in absent cells) and
/// the same rows as compact JSON Lines; returns the number of rows.
fn write_sparse(csv: &Path, jsonl: &Path, bytes: u64) -> usize {
    let mut csv = std::io::BufWriter::new(std::fs::File::create(csv).unwrap());
    let mut jsonl = std::io::BufWriter::new(std::fs::File::create(jsonl).unwrap());
    let header: Vec<String> = (0..SPARSE_COLUMNS).map(|c| format!("c{c}")).collect();
    writeln!(csv, "id,{}", header.join(",")).unwrap();
    let mut written = 0;
    let mut rows = 0;
    while written < bytes {
        let mut cells = vec!["NULL".to_string(); SPARSE_COLUMNS];
        let mut object = serde_json::Map::new();
        object.insert("id".into(), json!(format!("k{rows}")));
        for (c, text) in sparse_cells(rows) {
            object.insert(format!("c{c}"), json!(text));
            cells[c] = text;
        }
        let line = format!("k{rows},{}\n", cells.join(","));
        csv.write_all(line.as_bytes()).unwrap();
        writeln!(jsonl, "{}", Value::Object(object)).unwrap();
        written += line.len() as u64;
        rows += 1;
    }
    csv.flush().unwrap();
    jsonl.flush().unwrap();
    rows
}

#[test]
fn a_file_far_larger_than_the_memory_bound_loads_into_a_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("sparse.csv");
    let compact = dir.path().join("compact.jsonl");
    let rows = write_sparse(&csv, &compact, LARGE_FILE_BYTES);
    let file_bytes = std::fs::metadata(&csv).unwrap().len();
    let load = |file: &Path, data: &str| {
        let (output, peak_rss_bytes) =
            common::output_and_peak_rss_bytes(Command::new(env!("CARGO_BIN_EXE_puffer")).args([
                "load",
                "t",
                &file.display().to_string(),
                "--key",
                "id",
                "--batch-rows",
                "500",
                "--data",
                data,
            ]));
        assert!(output.status.success(), "{}", stderr(&output));
        assert!(
            stdout(&output).contains(&format!("loaded {rows} rows into t")),
            "{}",
            stdout(&output)
        );
        peak_rss_bytes
    };
    let data = dir.path().join("data").display().to_string();
    let peak_rss_bytes = load(&csv, &data);
    // With --data the store's own memory is in the process too: the same rows from a
    // small file measure it.
    let compact_data = dir.path().join("compact-data").display().to_string();
    let compact_peak_rss_bytes = load(&compact, &compact_data);
    eprintln!(
        "loaded {rows} rows from {:.1} MiB with --data: peak RSS {:.1} MiB; the same rows \
         from {:.1} MiB: {:.1} MiB",
        mib(file_bytes),
        mib(peak_rss_bytes),
        mib(std::fs::metadata(&compact).unwrap().len()),
        mib(compact_peak_rss_bytes)
    );
    assert!(file_bytes > 3 * LOADER_BOUND_BYTES);
    assert!(
        peak_rss_bytes < compact_peak_rss_bytes + LOADER_BOUND_BYTES,
        "peak RSS {:.1} MiB loading a {:.1} MiB file, {:.1} MiB loading its rows from a \
         small one",
        mib(peak_rss_bytes),
        mib(file_bytes),
        mib(compact_peak_rss_bytes)
    );

    // The oracle: the count, the types, a count per column and whole rows.
    let target = ["--data", data.as_str()];
    assert_eq!(count(&target, "t", ""), rows as u64);
    let attributes = sql(&target, "DESCRIBE t")["attributes"].clone();
    for c in [0, 1, 238, 239] {
        let expected = if c % 2 == 0 { "int" } else { "string" };
        assert_eq!(
            attributes[c],
            json!({"name": format!("c{c}"), "type": expected})
        );
    }
    for c in [0, 3, 100, 239] {
        let expected = (0..rows)
            .filter(|&i| sparse_cells(i).iter().any(|(column, _)| *column == c))
            .count() as u64;
        assert_eq!(
            count(&target, "t", &format!("c{c} IS NOT NULL")),
            expected,
            "c{c}"
        );
    }
    for i in [0, 1, 4_321, rows / 2, rows - 1] {
        let answer = sql(&target, &format!("SELECT * FROM t WHERE id = 'k{i}'"));
        let row = answer["rows"][0].as_object().expect("the row").clone();
        // Absent values are left out of the answer.
        let mut expected = serde_json::Map::new();
        expected.insert("id".into(), json!(format!("k{i}")));
        for (c, text) in sparse_cells(i) {
            let value = if c % 2 == 0 {
                json!(text.parse::<i64>().unwrap())
            } else {
                json!(text)
            };
            expected.insert(format!("c{c}"), value);
        }
        assert_eq!(row, expected, "row k{i}");
    }
}

#[test]
fn an_over_long_record_is_refused_naming_it_and_nothing_is_loaded() {
    use puffer_query::import::MAX_RECORD_BYTES;
    let fixture = Fixture::new();
    let data = fixture.data();
    let target = ["--data", data.as_str()];
    let first = fixture.write("first.csv", b"id,note\na,x\nb,y\n");
    load_ok(&["t", &first, "--key", "id", "--data", &data]);

    // 2,000 good rows, then one longer than the limit on line 2002, then more.
    let mut text = String::from("id,note\n");
    for i in 0..2000 {
        text += &format!("r{i},fine\n");
    }
    text += &format!("long,{}\n", "v".repeat(MAX_RECORD_BYTES));
    text += "after,fine\n";
    let long = fixture.write("long.csv", text.as_bytes());
    for table in ["t", "fresh"] {
        let message = load_fails(&[
            table,
            &long,
            "--key",
            "id",
            "--batch-rows",
            "100",
            "--data",
            &data,
        ]);
        assert!(
            message.contains("long.csv line 2002")
                && message.contains(&format!("longer than {MAX_RECORD_BYTES} bytes")),
            "{message}"
        );
        assert!(
            !message.contains("are loaded"),
            "claims a partial load: {message}"
        );
    }
    // Nothing was written: the existing table is unchanged and no table was created.
    assert_eq!(count(&target, "t", ""), 2);
    assert_eq!(sql(&target, "SHOW TABLES")["tables"], json!(["t"]));

    let jsonl = fixture.write(
        "long.jsonl",
        format!(
            "{{\"id\": \"a\"}}\n{{\"id\": \"{}\"}}\n",
            "k".repeat(MAX_RECORD_BYTES)
        )
        .as_bytes(),
    );
    let message = load_fails(&["t", &jsonl, "--key", "id", "--data", &data]);
    assert!(message.contains("long.jsonl line 2"), "{message}");
    assert_eq!(count(&target, "t", ""), 2);
}

#[test]
fn batch_rows_must_be_in_range_and_the_help_states_the_memory_bound() {
    let fixture = Fixture::new();
    let data = fixture.data();
    let [csv, _] = fixture.files();
    for (rows, expected) in [("0", "at least 1"), ("100001", "at most 100000")] {
        let message = load_fails(&[
            "t",
            &csv,
            "--key",
            "id",
            "--batch-rows",
            rows,
            "--data",
            &data,
        ]);
        assert!(message.contains(expected), "{message}");
    }
    let help = stdout(&puffer(&["load", "--help"]));
    for phrase in [
        "Memory is bounded whatever the size of the files",
        "at most 1 MiB",
        "at most 8 MiB for the duplicate-key check",
        "8 MiB as encoded for the store",
        "about 30 MiB at most, beyond the program itself",
    ] {
        assert!(help.contains(phrase), "{phrase:?} is not in:\n{help}");
    }
}
