//! End-to-end tests of `puffer serve` over HTTP. Each test starts its own server on a
//! temporary data directory and checks every answer against an oracle: a scan of the
//! records (or bytes) the test itself loaded.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Map, Value};
use tempfile::TempDir;

use common::{
    naive_occurrences, naive_range, naive_wildcard, ServeProcess, XorShift, TEXT_RANGES,
    TEXT_WILDCARDS,
};

// ---------------------------------------------------------------------------------------
// The server process
// ---------------------------------------------------------------------------------------

/// A running `puffer serve` on a temporary data directory, with HTTP clients for it.
struct Server {
    process: ServeProcess,
    base: String,
}

impl Server {
    /// Starts a server with extra environment variables and waits for its address.
    fn start(env: &[(&str, &str)]) -> Server {
        let data = TempDir::new().expect("cannot create a temporary directory");
        Server::start_in(data, env)
    }

    /// Stops the server and starts another on the same data directory.
    fn restart(self) -> Server {
        Server::start_in(self.process.stop(), &[])
    }

    fn start_in(data: TempDir, env: &[(&str, &str)]) -> Server {
        let process = ServeProcess::start(data, &[], env);
        let base = process.base.clone();
        Server { process, base }
    }

    /// A client presenting `token` (none: anonymous), keeping connections alive.
    fn client(&self, token: Option<&str>) -> Client {
        self.client_with(token, 100)
    }

    /// A client opening a connection for each request. The server answers a request
    /// with an unknown token before reading its body, then closes the connection
    /// without saying so (reported), so a pooled connection may be dead.
    fn client_without_keep_alive(&self, token: Option<&str>) -> Client {
        self.client_with(token, 0)
    }

    fn client_with(&self, token: Option<&str>, idle_connections: usize) -> Client {
        Client {
            base: self.base.clone(),
            token: token.map(str::to_string),
            agent: ureq::AgentBuilder::new()
                .timeout(Duration::from_secs(60))
                .max_idle_connections(idle_connections)
                .max_idle_connections_per_host(idle_connections)
                .build(),
        }
    }
}

// ---------------------------------------------------------------------------------------
// HTTP
// ---------------------------------------------------------------------------------------

/// One answer: status, content type and body, whatever the status.
#[derive(Debug)]
struct Reply {
    status: u16,
    content_type: String,
    /// Headers a test may look at: `content-length` and the `x-puffer-` ones.
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
}

impl Reply {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): status {} {:?}", self.status, self.text()))
    }

    /// The body as JSON, after checking the status.
    fn expect(&self, status: u16) -> Value {
        assert_eq!(
            self.status,
            status,
            "unexpected status; body: {}",
            self.text()
        );
        self.json()
    }
}

#[derive(Clone)]
struct Client {
    base: String,
    token: Option<String>,
    agent: ureq::Agent,
}

impl Client {
    fn send(&self, method: &str, path: &str, body: Option<(&str, &[u8])>) -> Reply {
        let mut request = self.agent.request(method, &format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            request = request.set("Authorization", &format!("Bearer {token}"));
        }
        let result = match body {
            Some((content_type, bytes)) => {
                request.set("Content-Type", content_type).send_bytes(bytes)
            }
            None => request.call(),
        };
        let response = match result {
            Ok(response) | Err(ureq::Error::Status(_, response)) => response,
            Err(e) => panic!("{method} {path}: {e}"),
        };
        let status = response.status();
        let content_type = response.header("content-type").unwrap_or("").to_string();
        let headers = response
            .headers_names()
            .into_iter()
            .filter(|name| name == "content-length" || name.starts_with("x-puffer-"))
            .filter_map(|name| Some((name.clone(), response.header(&name)?.to_string())))
            .collect();
        let mut body = Vec::new();
        response
            .into_reader()
            .read_to_end(&mut body)
            .expect("cannot read an answer");
        Reply {
            status,
            content_type,
            headers,
            body,
        }
    }

    fn get(&self, path: &str) -> Reply {
        self.send("GET", path, None)
    }

    fn delete(&self, path: &str) -> Reply {
        self.send("DELETE", path, None)
    }

    fn post(&self, path: &str, content_type: &str, body: &[u8]) -> Reply {
        self.send("POST", path, Some((content_type, body)))
    }

    fn post_json(&self, path: &str, body: &Value) -> Reply {
        self.post(path, "application/json", body.to_string().as_bytes())
    }

    fn sql(&self, query: &str) -> Reply {
        self.post_json("/v1/sql", &json!({ "query": query }))
    }

    fn sql_format(&self, query: &str, format: &str) -> Reply {
        self.post_json("/v1/sql", &json!({ "query": query, "format": format }))
    }
}

/// Checks an error answer (`{"code", "message", "retryable"}`) and returns its message.
fn expect_error(reply: &Reply, status: u16, code: &str) -> String {
    let body = reply.expect(status);
    assert_eq!(body["code"], code, "wrong error code: {body}");
    assert_eq!(body["retryable"], false, "{body}");
    let message = body["message"].as_str().unwrap_or_default();
    assert!(!message.is_empty(), "an error needs a message: {body}");
    message.to_string()
}

/// Checks `answer["snapshot"]` and that it shows every write up to `seq`.
fn check_snapshot(answer: &Value, seq: u64) {
    let snapshot = &answer["snapshot"];
    let read = snapshot["seq"]
        .as_u64()
        .unwrap_or_else(|| panic!("no snapshot.seq in {answer}"));
    assert!(read >= seq, "snapshot {read} misses write {seq}");
    assert!(
        snapshot["age_ms"].as_f64().is_some_and(|a| a >= 0.0),
        "{snapshot}"
    );
    assert!(snapshot["read_log"].is_boolean(), "{snapshot}");
}

/// A JSON Lines body.
fn jsonl(records: &[Value]) -> Vec<u8> {
    let lines: Vec<String> = records.iter().map(Value::to_string).collect();
    (lines.join("\n") + "\n").into_bytes()
}

/// Percent-encodes everything but unreserved characters (paths and query values).
fn encode(text: &str) -> String {
    encode_bytes(text.as_bytes())
}

/// [`encode`] for any bytes (text patterns need not be UTF-8).
fn encode_bytes(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|&b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// Generated data and the oracle
// ---------------------------------------------------------------------------------------

const MICROS_PER_DAY: i64 = 86_400_000_000;
const MARCH_1_2015: i64 = days_from_civil(2015, 3, 1) * MICROS_PER_DAY;
const JUNE_30_2015_NOON: i64 = days_from_civil(2015, 6, 30) * MICROS_PER_DAY + 43_200_000_000;

/// Days since 1970-01-01 of a proleptic Gregorian date.
const fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = if year >= 0 { year } else { year - 399 } / 400;
    let year_of_era = year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// Microseconds since the epoch of an RFC 3339 date-time as the server writes it.
fn parse_rfc3339(text: &str) -> i64 {
    try_parse_rfc3339(text).unwrap_or_else(|| panic!("not an RFC 3339 date-time: {text:?}"))
}

fn try_parse_rfc3339(text: &str) -> Option<i64> {
    let number = |range: std::ops::Range<usize>| text.get(range)?.parse::<i64>().ok();
    if text.as_bytes().get(10) != Some(&b'T') {
        return None;
    }
    let days = days_from_civil(number(0..4)?, number(5..7)?, number(8..10)?);
    let seconds = (number(11..13)? * 60 + number(14..16)?) * 60 + number(17..19)?;
    let mut rest = text.get(19..)?;
    let mut fraction = 0;
    if let Some(after_dot) = rest.strip_prefix('.') {
        let digits = after_dot.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 6 {
            return None;
        }
        fraction = format!("{:0<6}", &after_dot[..digits])
            .parse::<i64>()
            .ok()?;
        rest = &after_dot[digits..];
    }
    let offset_minutes = match rest.as_bytes() {
        b"Z" => 0,
        [sign @ (b'+' | b'-'), ..] if rest.len() == 6 => {
            let hours: i64 = rest.get(1..3)?.parse().ok()?;
            let minutes: i64 = rest.get(4..6)?.parse().ok()?;
            let magnitude = hours * 60 + minutes;
            if *sign == b'-' {
                -magnitude
            } else {
                magnitude
            }
        }
        _ => return None,
    };
    Some(days * MICROS_PER_DAY + seconds * 1_000_000 + fraction - offset_minutes * 60_000_000)
}

/// The columns of the test table, key first, as the server lists them.
const COLUMNS: [&str; 6] = ["id", "name", "qty", "price", "active", "at"];

/// Words of `name`, with a comma, quotes and a non-ASCII letter for CSV and LIKE.
const WORDS: &[&str] = &[
    "sea",
    "salt",
    "coral",
    "reef",
    "banana",
    "an",
    "puffer",
    "fish",
    "café",
    "salt, pepper",
    "the \"big\" one",
    "bream",
];

/// A key that needs percent-encoding in a path.
const ODD_KEY: &str = "odd key/ü%?";

/// One record of the test table (attributes may be absent).
#[derive(Clone, Debug, PartialEq)]
struct Row {
    id: String,
    name: Option<String>,
    qty: Option<i64>,
    price: Option<f64>,
    active: Option<bool>,
    at: Option<i64>,
}

/// The oracle: every live record, by key (ascending, as the API answers).
type Rows = BTreeMap<String, Row>;

impl Row {
    /// A record as the server answers it (timestamps as RFC 3339 strings).
    fn from_json(value: &Value) -> Row {
        let object = value
            .as_object()
            .unwrap_or_else(|| panic!("a row must be an object: {value}"));
        for column in object.keys() {
            assert!(
                COLUMNS.contains(&column.as_str()),
                "unknown column in {value}"
            );
        }
        Row {
            id: typed(object, "id", |v| v.as_str().map(str::to_string))
                .unwrap_or_else(|| panic!("a row needs its key: {value}")),
            name: typed(object, "name", |v| v.as_str().map(str::to_string)),
            qty: typed(object, "qty", Value::as_i64),
            price: typed(object, "price", Value::as_f64),
            active: typed(object, "active", Value::as_bool),
            at: typed(object, "at", |v| v.as_str().map(parse_rfc3339)),
        }
    }

    /// A record from a CSV line under `header` (an empty field is an absent value).
    fn from_csv(header: &[String], fields: &[String]) -> Row {
        assert_eq!(header.len(), fields.len(), "CSV line {fields:?}");
        let mut object = Map::new();
        for (column, field) in header.iter().zip(fields) {
            if field.is_empty() {
                continue;
            }
            let value = match column.as_str() {
                "qty" => json!(field.parse::<i64>().expect("CSV int")),
                "price" => json!(field.parse::<f64>().expect("CSV float")),
                "active" => json!(field.parse::<bool>().expect("CSV bool")),
                _ => json!(field),
            };
            object.insert(column.clone(), value);
        }
        Row::from_json(&Value::Object(object))
    }

    /// Only the key and `columns` kept.
    fn project(&self, columns: &[&str]) -> Row {
        let keep = |name: &str| columns.contains(&name);
        Row {
            id: self.id.clone(),
            name: self.name.clone().filter(|_| keep("name")),
            qty: self.qty.filter(|_| keep("qty")),
            price: self.price.filter(|_| keep("price")),
            active: self.active.filter(|_| keep("active")),
            at: self.at.filter(|_| keep("at")),
        }
    }
}

/// Column `name` of a JSON row converted by `convert` (None when absent or `null`).
fn typed<T>(
    row: &Map<String, Value>,
    name: &str,
    convert: impl Fn(&Value) -> Option<T>,
) -> Option<T> {
    let value = row.get(name).filter(|v| !v.is_null())?;
    Some(convert(value).unwrap_or_else(|| panic!("column {name} has the wrong type: {value}")))
}

/// A random timestamp and one of its input forms: micros, a date, RFC 3339 with `Z` or
/// with an offset.
fn random_timestamp(rng: &mut XorShift) -> (i64, Value) {
    let (year, month, day) = (
        2014 + rng.below(3) as i64,
        1 + rng.below(12) as i64,
        1 + rng.below(28) as i64,
    );
    let midnight = days_from_civil(year, month, day) * MICROS_PER_DAY;
    let date = format!("{year:04}-{month:02}-{day:02}");
    let seconds = rng.below(86_400) as i64;
    let fraction = if rng.chance(50) {
        rng.below(1_000_000) as i64
    } else {
        0
    };
    let clock = format!(
        "T{:02}:{:02}:{:02}.{fraction:06}",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    );
    let local = midnight + seconds * 1_000_000 + fraction;
    match rng.below(4) {
        0 => (local, json!(local)),
        1 => (midnight, json!(date)),
        2 => (local, json!(format!("{date}{clock}Z"))),
        _ => {
            let (text, offset_minutes) = if rng.chance(50) {
                ("+02:00", 120)
            } else {
                ("-05:30", -330)
            };
            (
                local - offset_minutes * 60_000_000,
                json!(format!("{date}{clock}{text}")),
            )
        }
    }
}

/// A price of -100.00 to 699.99 with at most two decimals, made from its decimal text
/// (a value with a short shortest representation: see the report on float input).
fn random_price(rng: &mut XorShift) -> f64 {
    let cents = rng.below(80_000) as i64 - 10_000;
    let sign = if cents < 0 { "-" } else { "" };
    let text = format!("{sign}{}.{:02}", cents.abs() / 100, cents.abs() % 100);
    text.parse().expect("a decimal")
}

/// A random record and the JSON sent for it (absent attributes omitted or `null`).
fn random_row(rng: &mut XorShift, id: &str) -> (Row, Value) {
    let mut row = Row {
        id: id.to_string(),
        name: None,
        qty: None,
        price: None,
        active: None,
        at: None,
    };
    let mut object = Map::new();
    object.insert("id".into(), json!(id));
    let present = |rng: &mut XorShift, column: &str, object: &mut Map<String, Value>| {
        let keep = rng.chance(85);
        if !keep && rng.chance(50) {
            object.insert(column.into(), Value::Null);
        }
        keep
    };
    if present(rng, "name", &mut object) {
        let words = 1 + rng.below(3);
        let name: Vec<&str> = (0..words)
            .map(|_| WORDS[rng.below(WORDS.len() as u64) as usize])
            .collect();
        row.name = Some(name.join(" "));
        object.insert("name".into(), json!(row.name));
    }
    if present(rng, "qty", &mut object) {
        row.qty = Some(rng.below(100) as i64 - 10);
        object.insert("qty".into(), json!(row.qty));
    }
    if present(rng, "price", &mut object) {
        row.price = Some(random_price(rng));
        object.insert("price".into(), json!(row.price));
    }
    if present(rng, "active", &mut object) {
        row.active = Some(rng.chance(50));
        object.insert("active".into(), json!(row.active));
    }
    if present(rng, "at", &mut object) {
        let (micros, input) = random_timestamp(rng);
        row.at = Some(micros);
        object.insert("at".into(), input);
    }
    (row, Value::Object(object))
}

/// The keys of `rows` matching `oracle`, and those rows, ascending by key.
fn scan<'r>(rows: &'r Rows, oracle: &dyn Fn(&Row) -> bool) -> Vec<&'r Row> {
    rows.values().filter(|row| oracle(row)).collect()
}

/// Compares answered rows with the oracle's, reporting the first difference.
fn assert_rows(context: &str, got: &[Row], expected: &[&Row]) {
    let got_keys: BTreeSet<&str> = got.iter().map(|r| r.id.as_str()).collect();
    let want_keys: BTreeSet<&str> = expected.iter().map(|r| r.id.as_str()).collect();
    let missing: Vec<_> = want_keys.difference(&got_keys).take(10).collect();
    let extra: Vec<_> = got_keys.difference(&want_keys).take(10).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{context}: {} rows, expected {}; missing {missing:?}, unexpected {extra:?}",
        got.len(),
        expected.len()
    );
    assert_eq!(got.len(), expected.len(), "{context}: duplicate rows");
    for (i, (got, want)) in got.iter().zip(expected).enumerate() {
        assert_eq!(
            got, *want,
            "{context}: row {i} differs (or is out of key order)"
        );
    }
}

/// The rows of a JSON answer.
fn rows_of(answer: &Value) -> Vec<Row> {
    answer["rows"]
        .as_array()
        .unwrap_or_else(|| panic!("no rows in {answer}"))
        .iter()
        .map(Row::from_json)
        .collect()
}

/// Records and fields of CSV text (RFC 4180 quoting, `\n` line ends).
fn parse_csv(text: &str) -> Vec<Vec<String>> {
    let (mut records, mut record, mut field) = (Vec::new(), Vec::new(), String::new());
    let (mut chars, mut quoted) = (text.chars().peekable(), false);
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') if field.is_empty() => quoted = true,
            (false, ',') => record.push(std::mem::take(&mut field)),
            (false, '\n') => {
                record.push(std::mem::take(&mut field));
                records.push(std::mem::take(&mut record));
            }
            (false, c) => field.push(c),
        }
    }
    assert!(
        !quoted && field.is_empty() && record.is_empty(),
        "CSV must end with a newline"
    );
    records
}

// ---------------------------------------------------------------------------------------
// A loaded table
// ---------------------------------------------------------------------------------------

/// The test table's creation request.
fn table_request(name: &str) -> Value {
    json!({
        "name": name,
        "key": "id",
        "attributes": [
            {"name": "name", "type": "string"},
            {"name": "qty", "type": "int"},
            {"name": "price", "type": "float"},
            {"name": "active", "type": "bool"},
            {"name": "at", "type": "timestamp"},
        ]
    })
}

/// Creates table `t` and checks the description answered.
fn create_table(api: &Client) {
    let description = api.post_json("/v1/tables", &table_request("t")).expect(201);
    assert_eq!(description["name"], "t");
    assert_eq!(description["key"], "id");
    assert_eq!(description["attributes"], table_request("t")["attributes"]);
    let again = api.get("/v1/tables/t").expect(200);
    assert_eq!(again["attributes"], description["attributes"]);
    assert!(again["stats"]["disk_bytes"].is_u64(), "{again}");
    assert!(again["watermarks"]["published"].is_u64(), "{again}");
}

/// A server with table `t`, the oracle of its records and the last write's `seq`.
struct Loaded {
    server: Server,
    api: Client,
    rows: Rows,
    seq: u64,
}

impl Loaded {
    /// Records a write's answer: its `seq` must be newer than every earlier one.
    fn wrote(&mut self, answer: &Value, operations: usize) {
        let seq = answer["seq"]
            .as_u64()
            .unwrap_or_else(|| panic!("no seq: {answer}"));
        assert!(seq > self.seq, "seq {seq} after {}", self.seq);
        if let Some(answered) = answer.get("operations") {
            assert_eq!(answered, operations, "{answer}");
        }
        self.seq = seq;
    }

    /// Posts one batch, as a JSON array or as JSON Lines.
    fn put_batch(&mut self, batch: &[(Row, Value)], json_lines: bool) {
        let items: Vec<Value> = batch.iter().map(|(_, v)| v.clone()).collect();
        let path = "/v1/tables/t/records";
        let reply = if json_lines {
            self.api.post(path, "application/x-ndjson", &jsonl(&items))
        } else {
            self.api.post_json(path, &json!(items))
        };
        self.wrote(&reply.expect(200), batch.len());
        for (row, _) in batch {
            self.rows.insert(row.id.clone(), row.clone());
        }
    }
}

/// Starts a server and loads 2,000 records in 8 batches (alternately JSON and JSON
/// Lines, keys in random order), then rewrites 100 of them in a ninth batch.
fn load() -> Loaded {
    let server = Server::start(&[]);
    let api = server.client(None);
    create_table(&api);
    let mut loaded = Loaded {
        server,
        api,
        rows: Rows::new(),
        seq: 0,
    };
    let mut rng = XorShift(0x5eed_cafe_f00d_1234);
    let mut records: Vec<(Row, Value)> = rng
        .permutation(2000)
        .into_iter()
        .map(|i| random_row(&mut rng, &format!("k{i:05}")))
        .collect();
    records[0] = random_row(&mut rng, ODD_KEY);
    for (i, batch) in records.chunks(250).enumerate() {
        loaded.put_batch(batch, i % 2 == 1);
    }
    let rewrites: Vec<(Row, Value)> = rng.permutation(2000)[..100]
        .iter()
        .map(|i| random_row(&mut rng, &format!("k{i:05}")))
        .collect();
    loaded.put_batch(&rewrites, false);
    assert_eq!(loaded.rows.len(), 2000);
    loaded
}

// ---------------------------------------------------------------------------------------
// Checks of a loaded table against the oracle
// ---------------------------------------------------------------------------------------

/// SQL conditions and what they mean under SQL's rules (an absent value satisfies no
/// comparison, and neither does its negation).
type SqlCase = (&'static str, fn(&Row) -> bool);

const SQL_CASES: &[SqlCase] = &[
    ("qty = 17", |r| r.qty == Some(17)),
    ("qty <> 5", |r| r.qty.is_some_and(|q| q != 5)),
    ("name <> 'coral reef'", |r| {
        r.name.as_deref().is_some_and(|n| n != "coral reef")
    }),
    ("price < 10.5", |r| r.price.is_some_and(|p| p < 10.5)),
    ("price <= 0", |r| r.price.is_some_and(|p| p <= 0.0)),
    ("qty > 50", |r| r.qty.is_some_and(|q| q > 50)),
    ("qty >= 50", |r| r.qty.is_some_and(|q| q >= 50)),
    ("5 < qty AND qty <= 8", |r| {
        r.qty.is_some_and(|q| q > 5 && q <= 8)
    }),
    ("at BETWEEN '2015-03-01' AND '2015-06-30T12:00:00Z'", |r| {
        r.at.is_some_and(|t| (MARCH_1_2015..=JUNE_30_2015_NOON).contains(&t))
    }),
    ("price BETWEEN -5 AND 5.25", |r| {
        r.price.is_some_and(|p| (-5.0..=5.25).contains(&p))
    }),
    ("at > 1430000000000000", |r| {
        r.at.is_some_and(|t| t > 1_430_000_000_000_000)
    }),
    ("qty IN (1, 2, 3, 89)", |r| {
        r.qty.is_some_and(|q| [1, 2, 3, 89].contains(&q))
    }),
    ("qty NOT IN (1, 2, 3)", |r| {
        r.qty.is_some_and(|q| ![1, 2, 3].contains(&q))
    }),
    ("name LIKE 'sea%'", |r| {
        r.name.as_deref().is_some_and(|n| n.starts_with("sea"))
    }),
    ("name LIKE '%salt'", |r| {
        r.name.as_deref().is_some_and(|n| n.ends_with("salt"))
    }),
    ("name LIKE '%an%'", |r| {
        r.name.as_deref().is_some_and(|n| n.contains("an"))
    }),
    ("name LIKE 'café%'", |r| {
        r.name.as_deref().is_some_and(|n| n.starts_with("café"))
    }),
    ("name NOT LIKE '%fish'", |r| {
        r.name.as_deref().is_some_and(|n| !n.ends_with("fish"))
    }),
    ("name = 'salt, pepper'", |r| {
        r.name.as_deref() == Some("salt, pepper")
    }),
    ("active = true AND qty < 20", |r| {
        r.active == Some(true) && r.qty.is_some_and(|q| q < 20)
    }),
    ("qty < 0 OR name LIKE 'coral%'", |r| {
        r.qty.is_some_and(|q| q < 0) || r.name.as_deref().is_some_and(|n| n.starts_with("coral"))
    }),
    ("price > -50.5 AND (active = true OR qty >= 80)", |r| {
        r.price.is_some_and(|p| p > -50.5)
            && (r.active == Some(true) || r.qty.is_some_and(|q| q >= 80))
    }),
    ("NOT (qty > 40)", |r| r.qty.is_some_and(|q| q <= 40)),
    ("NOT (qty > 40 OR name LIKE 'sea%')", |r| {
        r.qty.is_some_and(|q| q <= 40) && r.name.as_deref().is_some_and(|n| !n.starts_with("sea"))
    }),
    ("at IS NOT NULL", |r| r.at.is_some()),
    ("active = false AND at IS NULL", |r| {
        r.active == Some(false) && r.at.is_none()
    }),
    ("id IN ('k00001', 'k00002', 'k01999', 'nope')", |r| {
        ["k00001", "k00002", "k01999"].contains(&r.id.as_str())
    }),
    ("id >= 'k01990'", |r| r.id.as_str() >= "k01990"),
];

/// A JSON predicate and what it means.
type JsonCase = (Value, fn(&Row) -> bool);

/// JSON predicates and their meaning (`not` is plain negation: absent values match it).
fn json_cases() -> Vec<JsonCase> {
    vec![
        (json!({"eq": {"qty": 17}}), |r| r.qty == Some(17)),
        (json!({"eq": {"active": false}}), |r| {
            r.active == Some(false)
        }),
        (json!({"eq": {"name": "salt, pepper"}}), |r| {
            r.name.as_deref() == Some("salt, pepper")
        }),
        (
            json!({"in": {"name": ["coral", "sea salt", "banana"]}}),
            |r| {
                r.name
                    .as_deref()
                    .is_some_and(|n| ["coral", "sea salt", "banana"].contains(&n))
            },
        ),
        (json!({"in": {"id": ["k00001", "k00003", "zz"]}}), |r| {
            ["k00001", "k00003"].contains(&r.id.as_str())
        }),
        (json!({"range": {"price": {"gte": -10, "lt": 25.5}}}), |r| {
            r.price.is_some_and(|p| (-10.0..25.5).contains(&p))
        }),
        (
            json!({"range": {"at": {"gt": "2015-03-01", "lte": 1_450_000_000_000_000_i64}}}),
            |r| {
                r.at.is_some_and(|t| t > MARCH_1_2015 && t <= 1_450_000_000_000_000)
            },
        ),
        (
            json!({"range": {"id": {"gte": "k01000", "lt": "k01010"}}}),
            |r| ("k01000".."k01010").contains(&r.id.as_str()),
        ),
        (json!({"prefix": {"name": "sea"}}), |r| {
            r.name.as_deref().is_some_and(|n| n.starts_with("sea"))
        }),
        (json!({"suffix": {"name": "fish"}}), |r| {
            r.name.as_deref().is_some_and(|n| n.ends_with("fish"))
        }),
        (json!({"contains": {"name": "an"}}), |r| {
            r.name.as_deref().is_some_and(|n| n.contains("an"))
        }),
        (json!({"text_contains": "ana"}), |r| {
            r.name.as_deref().is_some_and(|n| n.contains("ana"))
        }),
        (json!({"exists": "at"}), |r| r.at.is_some()),
        (json!({"not": {"exists": "price"}}), |r| r.price.is_none()),
        (json!({"not": {"range": {"qty": {"gt": 40}}}}), |r| {
            r.qty.is_none_or(|q| q <= 40)
        }),
        (
            json!({"and": [{"eq": {"active": true}}, {"range": {"qty": {"lt": 20}}}]}),
            |r| r.active == Some(true) && r.qty.is_some_and(|q| q < 20),
        ),
        (
            json!({"or": [{"range": {"qty": {"lt": 0}}}, {"prefix": {"name": "coral"}}]}),
            |r| {
                r.qty.is_some_and(|q| q < 0)
                    || r.name.as_deref().is_some_and(|n| n.starts_with("coral"))
            },
        ),
        (
            json!({"and": [
                {"not": {"eq": {"active": false}}},
                {"or": [{"contains": {"name": "reef"}}, {"range": {"price": {"gt": 500}}}]}
            ]}),
            |r| {
                r.active != Some(false)
                    && (r.name.as_deref().is_some_and(|n| n.contains("reef"))
                        || r.price.is_some_and(|p| p > 500.0))
            },
        ),
        (json!({"all": true}), |_| true),
    ]
}

/// `GET /v1/tables/t/records/{key}` for 80 present and 20 absent keys, and the odd key.
fn check_gets(loaded: &Loaded, seed: u64) {
    let mut rng = XorShift(seed);
    let present: Vec<&String> = loaded.rows.keys().collect();
    let mut keys: Vec<String> = (0..80)
        .map(|_| present[rng.below(present.len() as u64) as usize].clone())
        .collect();
    keys.extend((0..10).map(|i| format!("k{:05}", 2000 + i * 37)));
    keys.extend((0..10).map(|i| format!("absent {i}/é")));
    keys.push(ODD_KEY.to_string());
    for key in &keys {
        let reply = loaded
            .api
            .get(&format!("/v1/tables/t/records/{}", encode(key)));
        let answer = match loaded.rows.get(key) {
            Some(row) => {
                let answer = reply.expect(200);
                assert_eq!(&Row::from_json(&answer["record"]), row, "GET {key:?}");
                answer
            }
            None => {
                expect_error(&reply, 404, "not_found");
                let answer = reply.json();
                assert!(answer["record"].is_null(), "GET {key:?}: {answer}");
                answer
            }
        };
        check_snapshot(&answer, loaded.seq);
    }
}

/// A SQL condition: `SELECT *` as JSON, CSV and JSON Lines, and `COUNT(*)`.
fn check_sql(loaded: &Loaded, condition: &str, oracle: &dyn Fn(&Row) -> bool) {
    let expected = scan(&loaded.rows, oracle);
    let query = format!("SELECT * FROM t WHERE {condition}");
    let answer = loaded.api.sql(&query).expect(200);
    assert_eq!(answer["columns"], json!(COLUMNS), "{query}");
    assert_eq!(answer["truncated"], false, "{query}");
    check_snapshot(&answer, loaded.seq);
    assert_rows(&query, &rows_of(&answer), &expected);
    check_csv(loaded, &query, &expected);
    check_jsonl(loaded, &query, &expected);
    let count_query = format!("SELECT COUNT(*) FROM t WHERE {condition}");
    let count = loaded.api.sql(&count_query).expect(200);
    assert_eq!(count["count"], expected.len(), "{count_query}");
    check_snapshot(&count, loaded.seq);
}

fn check_csv(loaded: &Loaded, query: &str, expected: &[&Row]) {
    let reply = loaded.api.sql_format(query, "csv");
    assert_eq!(reply.status, 200, "{query} as CSV: {}", reply.text());
    assert!(
        reply.content_type.starts_with("text/csv"),
        "{}",
        reply.content_type
    );
    let records = parse_csv(&reply.text());
    let (header, lines) = records.split_first().expect("a CSV header");
    assert_eq!(header, &COLUMNS, "{query} as CSV");
    let rows: Vec<Row> = lines.iter().map(|l| Row::from_csv(header, l)).collect();
    assert_rows(&format!("{query} as CSV"), &rows, expected);
}

fn check_jsonl(loaded: &Loaded, query: &str, expected: &[&Row]) {
    let reply = loaded.api.sql_format(query, "jsonl");
    assert_eq!(reply.status, 200, "{query} as JSON Lines: {}", reply.text());
    assert!(
        reply.content_type.contains("ndjson"),
        "{}",
        reply.content_type
    );
    let text = reply.text();
    let mut lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let tail = lines.pop().expect("a snapshot line");
    check_snapshot(&tail, loaded.seq);
    let rows: Vec<Row> = lines.iter().map(Row::from_json).collect();
    assert_rows(&format!("{query} as JSON Lines"), &rows, expected);
}

/// A JSON predicate: rows, a projection, and the count.
fn check_search(loaded: &Loaded, predicate: &Value, oracle: &dyn Fn(&Row) -> bool) {
    let expected = scan(&loaded.rows, oracle);
    let context = format!("search {predicate}");
    let answer = loaded
        .api
        .post_json("/v1/tables/t/search", &json!({"where": predicate}))
        .expect(200);
    check_snapshot(&answer, loaded.seq);
    assert_rows(&context, &rows_of(&answer), &expected);
    let columns = ["id", "qty", "at"];
    let body = json!({"where": predicate, "columns": columns});
    let answer = loaded
        .api
        .post_json("/v1/tables/t/search", &body)
        .expect(200);
    assert_eq!(answer["columns"], json!(columns), "{context}");
    let projected: Vec<Row> = expected.iter().map(|r| r.project(&columns)).collect();
    let projected: Vec<&Row> = projected.iter().collect();
    assert_rows(
        &format!("{context} (id, qty, at)"),
        &rows_of(&answer),
        &projected,
    );
    let body = json!({"where": predicate, "count": true});
    let count = loaded
        .api
        .post_json("/v1/tables/t/search", &body)
        .expect(200);
    assert_eq!(count["count"], expected.len(), "{context} count");
    check_snapshot(&count, loaded.seq);
}

/// Equality on values taken from the data: floats, timestamps, strings with quotes.
fn check_equalities(loaded: &Loaded) {
    for row in loaded.rows.values().step_by(97).take(8) {
        if let Some(price) = row.price {
            let oracle = move |r: &Row| r.price == Some(price);
            check_sql(loaded, &format!("price = {price}"), &oracle);
            check_search(loaded, &json!({"eq": {"price": price}}), &oracle);
        }
        if let Some(at) = row.at {
            let oracle = move |r: &Row| r.at == Some(at);
            check_sql(loaded, &format!("at = {at}"), &oracle);
            check_search(loaded, &json!({"eq": {"at": at}}), &oracle);
        }
        if let Some(name) = row.name.clone() {
            let literal = name.replace('\'', "''");
            let wanted = name.clone();
            let oracle = move |r: &Row| r.name.as_deref() == Some(wanted.as_str());
            check_sql(loaded, &format!("name = '{literal}'"), &oracle);
            check_search(loaded, &json!({"eq": {"name": name}}), &oracle);
        }
    }
}

/// A cut answer: `n` distinct matching records in key order, marked truncated. Which
/// records a LIMIT keeps is not specified (the store keeps any that match).
fn check_cut(
    context: &str,
    loaded: &Loaded,
    answer: &Value,
    n: usize,
    oracle: &dyn Fn(&Row) -> bool,
) {
    assert_eq!(answer["truncated"], true, "{context}: {answer}");
    check_snapshot(answer, loaded.seq);
    let rows = rows_of(answer);
    assert_eq!(rows.len(), n, "{context}");
    assert!(
        rows.windows(2).all(|w| w[0].id < w[1].id),
        "{context}: not in key order"
    );
    for row in &rows {
        assert_eq!(loaded.rows.get(&row.id), Some(row), "{context}: {row:?}");
        assert!(oracle(row), "{context}: {row:?} does not match");
    }
}

/// LIMIT and projections (which keep the key and the named columns).
fn check_limits_and_projections(loaded: &Loaded) {
    let oracle = |r: &Row| r.qty.is_some_and(|q| q >= 0);
    let expected = scan(&loaded.rows, &oracle);
    let answer = loaded
        .api
        .sql("SELECT * FROM t WHERE qty >= 0 LIMIT 7")
        .expect(200);
    check_cut("LIMIT 7", loaded, &answer, 7, &oracle);
    let body = json!({"where": {"range": {"qty": {"gte": 0}}}, "limit": 5});
    let answer = loaded
        .api
        .post_json("/v1/tables/t/search", &body)
        .expect(200);
    check_cut("search limit 5", loaded, &answer, 5, &oracle);
    let answer = loaded
        .api
        .sql("SELECT id, name, price FROM t WHERE qty >= 0 LIMIT 100000")
        .expect(200);
    assert_eq!(answer["columns"], json!(["id", "name", "price"]));
    assert_eq!(answer["truncated"], false, "LIMIT 100000");
    let projected: Vec<Row> = expected
        .iter()
        .map(|r| r.project(&["name", "price"]))
        .collect();
    let projected: Vec<&Row> = projected.iter().collect();
    assert_rows("SELECT id, name, price", &rows_of(&answer), &projected);
    let total = loaded.api.sql("SELECT COUNT(*) FROM t").expect(200);
    assert_eq!(total["count"], loaded.rows.len());
    check_snapshot(&total, loaded.seq);
}

/// Every check of the loaded table against the oracle.
fn check_all(loaded: &Loaded, seed: u64) {
    check_gets(loaded, seed);
    for (condition, oracle) in SQL_CASES {
        check_sql(loaded, condition, oracle);
    }
    for (predicate, oracle) in json_cases() {
        check_search(loaded, &predicate, &oracle);
    }
    check_equalities(loaded);
    check_limits_and_projections(loaded);
}

/// Deletes over HTTP and SQL, and inserts (one replacing a record) over SQL.
fn mutate(loaded: &mut Loaded) {
    let answer = loaded.api.delete("/v1/tables/t/records/k00007").expect(200);
    loaded.wrote(&answer, 1);
    loaded.rows.remove("k00007");
    let answer = loaded
        .api
        .delete(&format!("/v1/tables/t/records/{}", encode(ODD_KEY)))
        .expect(200);
    loaded.wrote(&answer, 1);
    loaded.rows.remove(ODD_KEY);
    let insert = "INSERT INTO t (id, name, qty, price, active, at) VALUES \
        ('new-1', 'sea bream', 42, -1.25, true, '2016-02-29T10:00:00Z'), \
        ('k00010', NULL, 7, NULL, false, 1450000000000000)";
    let answer = loaded.api.sql(insert).expect(200);
    loaded.wrote(&answer, 2);
    let new_row = Row {
        id: "new-1".into(),
        name: Some("sea bream".into()),
        qty: Some(42),
        price: Some(-1.25),
        active: Some(true),
        at: Some(days_from_civil(2016, 2, 29) * MICROS_PER_DAY + 36_000_000_000),
    };
    let replaced = Row {
        id: "k00010".into(),
        name: None,
        qty: Some(7),
        price: None,
        active: Some(false),
        at: Some(1_450_000_000_000_000),
    };
    loaded.rows.insert(new_row.id.clone(), new_row);
    loaded.rows.insert(replaced.id.clone(), replaced);
    let delete = "DELETE FROM t WHERE id IN ('k00011', 'k00012', 'absent-key')";
    let answer = loaded.api.sql(delete).expect(200);
    loaded.wrote(&answer, 3);
    loaded.rows.remove("k00011");
    loaded.rows.remove("k00012");
    let answer = loaded
        .api
        .sql("DELETE FROM t WHERE id = 'k00013'")
        .expect(200);
    loaded.wrote(&answer, 1);
    loaded.rows.remove("k00013");
}

#[test]
fn loaded_table_answers_match_a_scan() {
    let mut loaded = load();
    check_all(&loaded, 1);
    mutate(&mut loaded);
    for key in ["k00007", "k00011", "k00012", "k00013", ODD_KEY] {
        let reply = loaded
            .api
            .get(&format!("/v1/tables/t/records/{}", encode(key)));
        expect_error(&reply, 404, "not_found");
    }
    check_all(&loaded, 2);
    // Everything acknowledged survives a restart (the data is read back from disk).
    loaded.server = loaded.server.restart();
    loaded.api = loaded.server.client(None);
    check_all(&loaded, 3);
}

/// Answers larger than a chunk are sent in chunks, without a length, and read back in
/// every format as the oracle's rows, on the direct path and on DataFusion's, cut and
/// whole; a small answer is sent whole, with its length.
#[test]
fn large_answers_are_streamed_and_equal_the_oracle_in_every_format() {
    const RECORDS: usize = 3000;
    const MAX_RESULT_ROWS: usize = 2500;
    let server = Server::start(&[("PUFFER_MAX_RESULT_ROWS", "2500")]);
    let api = server.client(None);
    let table = json!({
        "name": "big", "key": "id",
        "attributes": [{"name": "note", "type": "string"}, {"name": "n", "type": "int"}],
    });
    api.post_json("/v1/tables", &table).expect(201);
    let mut rng = XorShift(0xb16_a45e);
    let mut oracle: BTreeMap<String, (String, i64)> = BTreeMap::new();
    for batch in rng.permutation(RECORDS).chunks(500) {
        let records: Vec<Value> = batch
            .iter()
            .map(|&i| {
                // Long notes with CSV's special characters: a row is ~300 bytes.
                let note = format!("{i}, \"quoted\"\n{}", "é".repeat(140));
                let n = i as i64 * 7 - 9000;
                oracle.insert(format!("b{i:05}"), (note.clone(), n));
                json!({"id": format!("b{i:05}"), "note": note, "n": n})
            })
            .collect();
        api.post_json("/v1/tables/big/records", &json!(records))
            .expect(200);
    }
    let want: Vec<(String, String, i64)> = oracle
        .iter()
        .map(|(id, (note, n))| (id.clone(), note.clone(), *n))
        .collect();
    let chunk_bytes = puffer_server::answers::CHUNK_BYTES;
    for (query, cut) in [
        ("SELECT * FROM big", true),
        ("SELECT * FROM big ORDER BY id", true),
        ("SELECT id, note, n FROM big ORDER BY id LIMIT 2000", false),
        ("SELECT * FROM big WHERE n < -8000", false),
    ] {
        // JSON: the oracle of the other formats once it matches the records.
        let reply = api.sql_format(query, "json");
        let answer = reply.expect(200);
        assert_eq!(answer["truncated"], cut, "{query}");
        let got: Vec<(String, String, i64)> = answer["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| {
                let text = |c: &str| {
                    row[c]
                        .as_str()
                        .unwrap_or_else(|| panic!("{row}"))
                        .to_string()
                };
                (text("id"), text("note"), row["n"].as_i64().unwrap())
            })
            .collect();
        let mut sorted = got.clone();
        sorted.sort();
        sorted.dedup();
        if query.contains("ORDER BY") || !cut {
            let expected: Vec<(String, String, i64)> = match (query.contains("WHERE"), cut) {
                (true, _) => want.iter().filter(|r| r.2 < -8000).cloned().collect(),
                (false, true) => want[..MAX_RESULT_ROWS].to_vec(),
                (false, false) => want[..2000].to_vec(),
            };
            assert!(
                sorted == expected,
                "{query}: {} rows, not the oracle's",
                got.len()
            );
        } else {
            // Any rows the limit leaves: each one a record, none twice.
            assert_eq!(sorted.len(), MAX_RESULT_ROWS, "{query}");
            let wrong = sorted
                .iter()
                .find(|(id, note, n)| oracle.get(id) != Some(&(note.clone(), *n)));
            assert!(wrong.is_none(), "{query}: {wrong:?} is no record");
        }
        let whole = reply.body.len() < chunk_bytes;
        assert_eq!(
            reply.headers.contains_key("content-length"),
            whole,
            "{query}: {} bytes, sent with a length: {:?}",
            reply.body.len(),
            reply.headers
        );
        assert!(
            whole == query.contains("WHERE"),
            "{query}: {} bytes",
            reply.body.len()
        );

        let reply = api.sql_format(query, "jsonl");
        assert_eq!(reply.status, 200, "{query}");
        let mut lines: Vec<Value> = reply
            .text()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let tail = lines.pop().unwrap();
        assert_eq!(tail["truncated"], cut, "{query}: {tail}");
        assert_eq!(tail["snapshot"], answer["snapshot"], "{query}");
        assert_eq!(
            lines,
            *answer["rows"].as_array().unwrap(),
            "{query} as JSON Lines"
        );

        let reply = api.sql_format(query, "csv");
        assert_eq!(reply.status, 200, "{query}");
        assert_eq!(
            reply.headers["x-puffer-truncated"],
            cut.to_string(),
            "{query}"
        );
        let records = parse_csv(&reply.text());
        let (header, lines) = records.split_first().unwrap();
        let column = |name: &str| header.iter().position(|c| c == name).unwrap();
        let (id, note, n) = (column("id"), column("note"), column("n"));
        let csv: Vec<(String, String, i64)> = lines
            .iter()
            .map(|l| (l[id].clone(), l[note].clone(), l[n].parse().unwrap()))
            .collect();
        assert_eq!(csv, got, "{query} as CSV");

        let reply = api.sql_format(query, "arrow");
        assert_eq!(reply.status, 200, "{query}");
        assert_eq!(
            reply.headers["x-puffer-truncated"],
            cut.to_string(),
            "{query}"
        );
        let (schema, batches) = puffer_analytics::convert::read_ipc_stream(&reply.body).unwrap();
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        let (id, note, n) = (
            names.iter().position(|c| *c == "id").unwrap(),
            names.iter().position(|c| *c == "note").unwrap(),
            names.iter().position(|c| *c == "n").unwrap(),
        );
        let text = |v: &Option<puffer_store::Value>| match v {
            Some(puffer_store::Value::String(s)) => String::from_utf8(s.clone()).unwrap(),
            other => panic!("{query}: not a string: {other:?}"),
        };
        let arrow: Vec<(String, String, i64)> = puffer_analytics::convert::rows_of(&batches)
            .unwrap()
            .iter()
            .map(|row| match &row[n] {
                Some(puffer_store::Value::Int(x)) => (text(&row[id]), text(&row[note]), *x),
                other => panic!("{query}: n is not an int: {other:?}"),
            })
            .collect();
        assert_eq!(arrow, got, "{query} as Arrow");
    }
}

// ---------------------------------------------------------------------------------------
// Auth
// ---------------------------------------------------------------------------------------

const READ_TOKEN: &str = "read-secret-1";
const WRITE_TOKEN: &str = "write-secret-2";
const ADMIN_TOKEN: &str = "admin-secret-3";

/// Every record of `t` and the table list: what a refused request must leave unchanged.
type TableState = (Vec<Row>, Value);

/// The state of the data, read with `api`.
fn table_state(api: &Client) -> TableState {
    let answer = api.sql("SELECT * FROM t").expect(200);
    assert_eq!(answer["truncated"], false);
    let count = api.sql("SELECT COUNT(*) FROM t").expect(200);
    let rows = rows_of(&answer);
    assert_eq!(count["count"], rows.len());
    let tables = api.sql("SHOW TABLES").expect(200);
    (rows, tables)
}

/// Posts `rows` as one batch, checking it is accepted.
fn put_rows(api: &Client, rows: &[(Row, Value)]) {
    let items: Vec<&Value> = rows.iter().map(|(_, v)| v).collect();
    let answer = api
        .post_json("/v1/tables/t/records", &json!(items))
        .expect(200);
    assert_eq!(answer["operations"], rows.len());
}

fn random_rows(seed: u64, prefix: &str, n: usize) -> Vec<(Row, Value)> {
    let mut rng = XorShift(seed);
    (0..n)
        .map(|i| random_row(&mut rng, &format!("{prefix}{i:03}")))
        .collect()
}

/// Requests a read token may not make (writes, tables, texts).
fn write_requests(api: &Client, record: &Value) -> Vec<(&'static str, Reply)> {
    vec![
        (
            "put",
            api.post_json("/v1/tables/t/records", &json!([record])),
        ),
        ("delete", api.delete("/v1/tables/t/records/a000")),
        (
            "sql insert",
            api.sql("INSERT INTO t (id, qty) VALUES ('evil', 1)"),
        ),
        ("sql delete", api.sql("DELETE FROM t WHERE id = 'a001'")),
    ]
}

/// Requests only an admin may make.
fn admin_requests(api: &Client) -> Vec<(&'static str, Reply)> {
    vec![
        ("create", api.post_json("/v1/tables", &table_request("u"))),
        (
            "sql create",
            api.sql("CREATE TABLE v (id TEXT PRIMARY KEY, n INT)"),
        ),
        ("drop", api.delete("/v1/tables/t")),
        ("sql drop", api.sql("DROP TABLE t")),
        (
            "text",
            api.post("/v1/texts/doc", "text/plain", b"some text"),
        ),
    ]
}

#[test]
fn tokens_grant_roles_and_refusals_change_nothing() {
    let server = Server::start(&[
        ("PUFFER_READ_TOKEN", READ_TOKEN),
        ("PUFFER_WRITE_TOKEN", WRITE_TOKEN),
        ("PUFFER_ADMIN_TOKEN", ADMIN_TOKEN),
    ]);
    let anonymous = server.client(None);
    let bad = server.client_without_keep_alive(Some("not-a-token"));
    let read = server.client(Some(READ_TOKEN));
    let write = server.client(Some(WRITE_TOKEN));
    let admin = server.client(Some(ADMIN_TOKEN));
    admin
        .post_json("/v1/tables", &table_request("t"))
        .expect(201);
    let rows = random_rows(7, "a", 20);
    put_rows(&write, &rows);
    let before = table_state(&read);
    assert_eq!(before.0.len(), 20);

    for client in [&anonymous, &bad] {
        for path in ["/v1/tables", "/v1/tables/t", "/v1/tables/t/records/a000"] {
            expect_error(&client.get(path), 401, "unauthorized");
        }
        let search = client.post_json("/v1/tables/t/search", &json!({}));
        expect_error(&search, 401, "unauthorized");
        expect_error(&client.sql("SELECT COUNT(*) FROM t"), 401, "unauthorized");
        for (what, reply) in write_requests(client, &rows[0].1) {
            assert_eq!(reply.status, 401, "{what}: {}", reply.text());
        }
        for (what, reply) in admin_requests(client) {
            assert_eq!(reply.status, 401, "{what}: {}", reply.text());
        }
        assert_eq!(
            table_state(&read),
            before,
            "a refused request changed the data"
        );
    }
    for path in ["/health", "/ready", "/metrics", "/openapi.json"] {
        assert_eq!(anonymous.get(path).status, 200, "{path} needs no token");
    }

    let record = read.get("/v1/tables/t/records/a000").expect(200);
    assert_eq!(Row::from_json(&record["record"]), rows[0].0);
    for (what, reply) in write_requests(&read, &json!({"id": "evil", "qty": 1})) {
        expect_error(&reply, 403, "forbidden");
        assert_eq!(
            table_state(&read),
            before,
            "a refused {what} changed the data"
        );
    }
    for client in [&read, &write] {
        for (what, reply) in admin_requests(client) {
            expect_error(&reply, 403, "forbidden");
            assert_eq!(
                table_state(&read),
                before,
                "a refused {what} changed the data"
            );
        }
    }
    let text = admin.get("/v1/texts/doc/count?pattern=a");
    expect_error(&text, 404, "unknown_text");

    let more = random_rows(8, "b", 5);
    put_rows(&write, &more);
    let expected: Vec<Row> = rows.iter().chain(&more).map(|(r, _)| r.clone()).collect();
    assert_eq!(table_state(&read).0, expected);
    write.delete("/v1/tables/t/records/b000").expect(200);
    let expected: Vec<Row> = expected.into_iter().filter(|r| r.id != "b000").collect();
    assert_eq!(table_state(&read).0, expected);

    admin
        .post_json("/v1/tables", &table_request("u"))
        .expect(201);
    admin
        .post("/v1/texts/doc", "text/plain", b"some text")
        .expect(201);
    assert_eq!(
        read.get("/v1/texts/doc/count?pattern=e").expect(200)["count"],
        2
    );
    let tables = read.get("/v1/tables").expect(200);
    let names: Vec<&Value> = tables["tables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["name"])
        .collect();
    assert_eq!(names, [&json!("t"), &json!("u")]);
}

// ---------------------------------------------------------------------------------------
// Bad input
// ---------------------------------------------------------------------------------------

/// Sends a request that must be refused with `status` and `code`, and checks the data
/// is unchanged. Returns the error message.
fn refused(api: &Client, before: &TableState, reply: Reply, status: u16, code: &str) -> String {
    let message = expect_error(&reply, status, code);
    assert_eq!(
        &table_state(api),
        before,
        "a refused request ({code}) changed the data"
    );
    message
}

/// Malformed bodies and records of the wrong type: nothing of the batch is applied.
fn check_bad_records(api: &Client, before: &TableState) {
    let valid = [
        json!({"id": "x1", "qty": 1}),
        json!({"id": "x3", "name": "ok"}),
    ];
    let records = "/v1/tables/t/records";
    let reply = api.post(records, "application/json", br#"[{"id": "x1", "qty": 1},"#);
    refused(api, before, reply, 400, "bad_json");
    let body = [jsonl(&valid[..1]), b"{\"id\": \"x2\",\n".to_vec()].concat();
    let reply = api.post(records, "application/x-ndjson", &body);
    refused(api, before, reply, 400, "bad_json");
    let reply = api.post(
        "/v1/sql",
        "application/json",
        br#"{"query": "SELECT * FROM t"#,
    );
    refused(api, before, reply, 400, "bad_json");

    let empty_key = json!([valid[0], {"id": "", "qty": 2}, valid[1]]);
    let reply = api.post_json(records, &empty_key);
    refused(api, before, reply, 400, "invalid_record");
    // A wrong type is refused as a whole, as an invalid record.
    for bad in [
        json!({"id": "x2", "qty": "many"}),
        json!({"id": "x2", "at": "yesterday"}),
    ] {
        let reply = api.post_json(records, &json!([valid[0], bad, valid[1]]));
        refused(api, before, reply, 400, "invalid_record");
        let body = jsonl(&[valid[0].clone(), bad, valid[1].clone()]);
        let reply = api.post(records, "application/x-ndjson", &body);
        refused(api, before, reply, 400, "invalid_record");
    }
    // A body over PUFFER_MAX_BODY_BYTES (64 KiB) is refused before it is parsed. The
    // server reads and drops up to the limit before answering; the body is only a little
    // over, so that the socket buffers take the rest, and a client still writing does not
    // see a reset instead of the answer.
    let huge: Vec<Value> = (0..1100)
        .map(|i| json!({"id": format!("big{i}"), "name": "x".repeat(40)}))
        .collect();
    let reply = api.post_json(records, &Value::Array(huge));
    refused(api, before, reply, 413, "limit_exceeded");
    let reply = api.sql("INSERT INTO t (id, qty) VALUES ('x1', 1), ('x2', 'many')");
    refused(api, before, reply, 400, "invalid_request");
}

/// Unknown tables and texts.
fn check_unknown_names(api: &Client, before: &TableState) {
    let replies = [
        api.get("/v1/tables/nosuch"),
        api.get("/v1/tables/nosuch/records/k"),
        api.delete("/v1/tables/nosuch/records/k"),
        api.delete("/v1/tables/nosuch"),
        api.post_json("/v1/tables/nosuch/records", &json!([{"id": "k"}])),
        api.post_json("/v1/tables/nosuch/search", &json!({})),
        api.sql("SELECT * FROM nosuch"),
        api.sql("INSERT INTO nosuch (id) VALUES ('k')"),
    ];
    for reply in replies {
        refused(api, before, reply, 404, "unknown_table");
    }
    for path in [
        "/v1/texts/nosuch/count?pattern=a",
        "/v1/texts/nosuch/extract?offset=0&len=1",
        "/v1/texts/nosuch/range?lo=a&hi=b",
        "/v1/texts/nosuch/wildcard?prefix=a&suffix=b&max_gap=1",
    ] {
        refused(api, before, api.get(path), 404, "unknown_text");
    }
}

/// Batches over PUFFER_MAX_BATCH_RECORDS (50), answers over PUFFER_MAX_RESULT_ROWS
/// (100), text patterns over 4,096 bytes, extracts over PUFFER_MAX_BODY_BYTES (64 KiB).
fn check_limits(api: &Client, before: &TableState) {
    let batch: Vec<Value> = random_rows(99, "over", 51)
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    let records = "/v1/tables/t/records";
    refused(
        api,
        before,
        api.post_json(records, &json!(batch)),
        413,
        "limit_exceeded",
    );
    let reply = api.post(records, "application/x-ndjson", &jsonl(&batch));
    refused(api, before, reply, 413, "limit_exceeded");
    let values: Vec<String> = (0..51).map(|i| format!("('over{i:03}', {i})")).collect();
    let insert = format!("INSERT INTO t (id, qty) VALUES {}", values.join(", "));
    refused(api, before, api.sql(&insert), 413, "limit_exceeded");
    let keys: Vec<String> = (0..51).map(|i| format!("'a{i:03}'")).collect();
    let delete = format!("DELETE FROM t WHERE id IN ({})", keys.join(", "));
    refused(api, before, api.sql(&delete), 413, "limit_exceeded");
    refused(
        api,
        before,
        api.sql("SELECT * FROM t LIMIT 101"),
        413,
        "limit_exceeded",
    );
    let search = api.post_json("/v1/tables/t/search", &json!({"limit": 101}));
    refused(api, before, search, 413, "limit_exceeded");
    let texts = [
        "/v1/texts/tiny/search?pattern=t&limit=101".to_string(),
        format!("/v1/texts/tiny/count?pattern={}", "t".repeat(4097)),
        "/v1/texts/tiny/extract?offset=0&len=65537".to_string(),
        "/v1/texts/tiny/range?lo=a&hi=b&limit=101".to_string(),
        format!("/v1/texts/tiny/range?lo={}&hi=u", "t".repeat(4097)),
        "/v1/texts/tiny/wildcard?prefix=t&suffix=t&max_gap=3&limit=101".to_string(),
        format!(
            "/v1/texts/tiny/wildcard?prefix=t&suffix={}&max_gap=3",
            "t".repeat(4097)
        ),
    ];
    for path in texts {
        refused(api, before, api.get(&path), 413, "limit_exceeded");
    }
    let answer = api.sql("SELECT * FROM t LIMIT 100").expect(200);
    assert_eq!(rows_of(&answer), before.0, "LIMIT at the maximum");
}

/// SQL neither engine takes: 400 `unsupported`, naming the construct; a query on a
/// table that does not exist: 404, whichever engine plans it.
fn check_unsupported_sql(api: &Client, before: &TableState) {
    let cases = [
        ("UPDATE t SET qty = 1", "UPDATE"),
        ("CREATE VIEW v AS SELECT * FROM t", "CREATE VIEW"),
    ];
    for (query, construct) in cases {
        let message = refused(api, before, api.sql(query), 400, "unsupported");
        assert!(
            message.contains(construct),
            "{query}: {message:?} names no {construct}"
        );
    }
    refused(api, before, api.sql("SELEC * FROM t"), 400, "syntax_error");
    refused(
        api,
        before,
        api.sql("SELECT COUNT(*) FROM t GROUP BY"),
        400,
        "syntax_error",
    );
    let join = api.sql("SELECT * FROM t JOIN nope ON t.id = nope.id");
    refused(api, before, join, 404, "unknown_table");
    let function = api.sql("SELECT no_such_function(qty) FROM t GROUP BY qty");
    refused(api, before, function, 400, "invalid_request");
}

/// Queries beyond the store's own subset (GROUP BY, ORDER BY, joins, LIKE with an
/// inner wildcard, OFFSET) answered by the analytics engine: each against the oracle
/// `rows` (every record of `t`, ascending by key), as JSON and CSV, with the snapshot
/// the store's own path reports and the server's largest answer enforced.
fn check_analytics_sql(api: &Client, rows: &[Row]) {
    let mut counts: BTreeMap<Option<i64>, u64> = BTreeMap::new();
    for row in rows {
        *counts.entry(row.qty).or_default() += 1;
    }
    // NULLs sort last, as DataFusion orders them ascending.
    let mut expected: Vec<(Option<i64>, u64)> = counts.into_iter().collect();
    expected.sort_by_key(|(qty, _)| (qty.is_none(), *qty));
    let query = "SELECT qty, COUNT(*) AS n FROM t GROUP BY qty ORDER BY qty";
    let answer = api.sql(query).expect(200);
    assert_eq!(answer["columns"], json!(["qty", "n"]));
    let got: Vec<(Option<i64>, u64)> = answer["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| (r["qty"].as_i64(), r["n"].as_u64().expect("a count")))
        .collect();
    assert_eq!(got, expected, "{query}");
    let direct = api.sql("SELECT COUNT(*) FROM t").expect(200);
    assert_eq!(answer["snapshot"]["seq"], direct["snapshot"]["seq"]);
    let csv = api.sql_format(query, "csv");
    assert_eq!(csv.status, 200, "{query} as CSV: {}", csv.text());
    let csv = csv.text();
    let mut want = String::from("qty,n\n");
    for (qty, n) in &expected {
        want.push_str(&format!(
            "{},{n}\n",
            qty.map_or(String::new(), |q| q.to_string())
        ));
    }
    assert_eq!(csv, want, "{query} as CSV");

    let mut priced: Vec<&Row> = rows.iter().filter(|r| r.price.is_some()).collect();
    priced.sort_by(|a, b| b.price.partial_cmp(&a.price).unwrap().then(a.id.cmp(&b.id)));
    let query =
        "SELECT id, price FROM t WHERE price IS NOT NULL ORDER BY price DESC, id LIMIT 4 OFFSET 1";
    let answer = api.sql(query).expect(200);
    let expected: Vec<Row> = priced
        .iter()
        .skip(1)
        .take(4)
        .map(|r| r.project(&["price"]))
        .collect();
    assert_eq!(rows_of(&answer), expected, "{query}");

    let inner = |name: &Option<String>| {
        name.as_deref()
            .is_some_and(|n| n.find('e').is_some_and(|at| n[at + 1..].contains('r')))
    };
    let query = "SELECT id, name FROM t WHERE name LIKE '%e%r%' ORDER BY id";
    let expected: Vec<Row> = rows
        .iter()
        .filter(|r| inner(&r.name))
        .map(|r| r.project(&["name"]))
        .collect();
    assert!(
        !expected.is_empty(),
        "the test rows have names with an e before an r"
    );
    assert_eq!(rows_of(&api.sql(query).expect(200)), expected, "{query}");

    // A self-join: its two id columns are told apart by their tables, and the answer
    // is cut at the server's largest (PUFFER_MAX_RESULT_ROWS = 100).
    let query = "SELECT a.id, b.id FROM t a CROSS JOIN t b ORDER BY a.id, b.id";
    let answer = api.sql(query).expect(200);
    assert_eq!(answer["columns"], json!(["a.id", "b.id"]));
    assert_eq!(answer["truncated"], rows.len() * rows.len() > 100);
    let got = answer["rows"].as_array().expect("rows");
    assert_eq!(got.len(), (rows.len() * rows.len()).min(100));
    assert_eq!(got[0], json!({"a.id": rows[0].id, "b.id": rows[0].id}));
    assert_eq!(
        got[99],
        json!({"a.id": rows[99 / rows.len()].id, "b.id": rows[99 % rows.len()].id})
    );
}

/// Other refusals: existing names, bad freshness, bad predicates.
fn check_other_refusals(api: &Client, before: &TableState) {
    let create = api.post_json("/v1/tables", &table_request("t"));
    refused(api, before, create, 409, "table_exists");
    let create = api.sql("CREATE TABLE t (id TEXT PRIMARY KEY, qty INT)");
    refused(api, before, create, 409, "table_exists");
    let text = api.post("/v1/texts/tiny", "text/plain", b"again");
    refused(api, before, text, 409, "text_exists");
    let fresh = json!({"query": "SELECT * FROM t", "freshness_s": -1});
    refused(
        api,
        before,
        api.post_json("/v1/sql", &fresh),
        400,
        "invalid_request",
    );
    let get = api.get("/v1/tables/t/records/a000?freshness_s=-1");
    refused(api, before, get, 400, "invalid_request");
    for predicate in [
        json!({"bogus": 1}),
        json!({"eq": {"qty": "x"}}),
        json!({"eq": {"nope": 1}}),
    ] {
        let reply = api.post_json("/v1/tables/t/search", &json!({"where": predicate}));
        refused(api, before, reply, 400, "invalid_request");
    }
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let server = Server::start(&[
        ("PUFFER_MAX_BATCH_RECORDS", "50"),
        ("PUFFER_MAX_RESULT_ROWS", "100"),
        ("PUFFER_MAX_BODY_BYTES", "65536"),
    ]);
    let api = server.client(None);
    api.post_json("/v1/tables", &table_request("t")).expect(201);
    let rows = random_rows(3, "a", 30);
    put_rows(&api, &rows[..15]);
    put_rows(&api, &rows[15..]);
    api.post("/v1/texts/tiny", "text/plain", b"tiny text")
        .expect(201);
    let before = table_state(&api);
    let loaded: Vec<Row> = rows.iter().map(|(r, _)| r.clone()).collect();
    assert_eq!(before.0, loaded);
    check_bad_records(&api, &before);
    check_unknown_names(&api, &before);
    check_limits(&api, &before);
    check_unsupported_sql(&api, &before);
    check_analytics_sql(&api, &before.0);
    check_other_refusals(&api, &before);
}

// ---------------------------------------------------------------------------------------
// OpenAPI, texts, health
// ---------------------------------------------------------------------------------------

const TEXT_WORDS: &[&str] = &[
    "puffer", "fish", "banana", "bandana", "sea", "salt", "coral", "reef", "ocean", "an", "a",
];

const TEXT_PATTERNS: &[&str] = &[
    "puffer",
    "fish",
    "a",
    "an",
    "ana",
    "banana",
    "sea salt",
    "h\ns",
    " ",
    "\n",
    "r b",
    "zzz",
    "pufferfishx",
    "é",
];

/// About `len` bytes of pseudo-random words separated by spaces and newlines.
fn generate_text(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = XorShift(seed);
    let mut text = Vec::with_capacity(len + 16);
    while text.len() < len {
        let word = TEXT_WORDS[rng.below(TEXT_WORDS.len() as u64) as usize];
        text.extend_from_slice(word.as_bytes());
        text.push(if rng.chance(12) { b'\n' } else { b' ' });
    }
    text
}

/// Wildcard matches as the API writes them: `[{"start": p, "len": l}, ...]`.
fn wildcard_json(matches: &[(u64, u64)]) -> Value {
    matches
        .iter()
        .map(|(start, len)| json!({"start": start, "len": len}))
        .collect()
}

/// `GET /v1/texts/{name}/range` against [`naive_range`], without and with a limit.
fn check_range(api: &Client, name: &str, text: &[u8], lo: &[u8], hi: &[u8]) {
    let expected = naive_range(text, lo, hi);
    let path = format!(
        "/v1/texts/{name}/range?lo={}&hi={}",
        encode_bytes(lo),
        encode_bytes(hi)
    );
    let label = format!("range {lo:?}..{hi:?}");
    assert_eq!(
        api.get(&path).expect(200)["offsets"],
        json!(expected),
        "{label}"
    );
    for limit in [0, 1, 7] {
        let limited = api.get(&format!("{path}&limit={limit}")).expect(200);
        let smallest = &expected[..expected.len().min(limit)];
        assert_eq!(
            limited["offsets"],
            json!(smallest),
            "{label}, limit {limit}"
        );
    }
}

/// `GET /v1/texts/{name}/wildcard` against [`naive_wildcard`], without and with a limit.
fn check_wildcard(api: &Client, name: &str, text: &[u8], prefix: &[u8], suffix: &[u8], gap: u64) {
    let expected = naive_wildcard(text, prefix, suffix, gap);
    let path = format!(
        "/v1/texts/{name}/wildcard?prefix={}&suffix={}&max_gap={gap}",
        encode_bytes(prefix),
        encode_bytes(suffix)
    );
    let label = format!("wildcard {prefix:?} {gap} {suffix:?}");
    assert_eq!(
        api.get(&path).expect(200)["matches"],
        wildcard_json(&expected),
        "{label}"
    );
    for limit in [0, 1, 5] {
        let limited = api.get(&format!("{path}&limit={limit}")).expect(200);
        let first = &expected[..expected.len().min(limit)];
        assert_eq!(
            limited["matches"],
            wildcard_json(first),
            "{label}, limit {limit}"
        );
    }
}

/// Count, search, range, wildcard and extract of an uploaded text against its bytes.
fn check_text(api: &Client, name: &str, text: &[u8]) {
    for pattern in TEXT_PATTERNS {
        let expected = naive_occurrences(text, pattern.as_bytes());
        let query = encode(pattern);
        let count = api
            .get(&format!("/v1/texts/{name}/count?pattern={query}"))
            .expect(200);
        assert_eq!(count["count"], expected.len(), "count of {pattern:?}");
        let search = api
            .get(&format!("/v1/texts/{name}/search?pattern={query}"))
            .expect(200);
        assert_eq!(search["offsets"], json!(expected), "offsets of {pattern:?}");
        let limited = api
            .get(&format!("/v1/texts/{name}/search?pattern={query}&limit=3"))
            .expect(200);
        let smallest = &expected[..expected.len().min(3)];
        assert_eq!(
            limited["offsets"],
            json!(smallest),
            "3 offsets of {pattern:?}"
        );
    }
    for (lo, hi) in TEXT_RANGES {
        check_range(api, name, text, lo.as_bytes(), hi.as_bytes());
    }
    for (prefix, suffix, gap) in TEXT_WILDCARDS {
        check_wildcard(api, name, text, prefix.as_bytes(), suffix.as_bytes(), *gap);
    }
    let len = text.len();
    for (offset, span) in [(0, 10), (1234, 100), (len - 5, 5), (0, len), (len / 2, 1)] {
        let reply = api.get(&format!(
            "/v1/texts/{name}/extract?offset={offset}&len={span}"
        ));
        assert_eq!(
            reply.status,
            200,
            "extract {offset}+{span}: {}",
            reply.text()
        );
        assert_eq!(
            reply.body,
            &text[offset..offset + span],
            "extract {offset}+{span}"
        );
    }
}

/// Method, path template and (a parameter-free form of the path) of each endpoint of
/// docs/http.md's endpoint table.
fn documented_routes() -> BTreeSet<(String, String)> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/http.md"))
        .expect("cannot read docs/http.md");
    doc.lines()
        .filter_map(|line| line.strip_prefix("| `")?.split('`').next())
        .filter_map(|cell| {
            let (method, path) = cell.split_once(' ')?;
            let known = ["GET", "POST", "DELETE", "PUT", "PATCH"].contains(&method);
            known.then(|| (method.to_lowercase(), normalize(path)))
        })
        .collect()
}

/// A path template with its query removed and its parameters named `{}`.
fn normalize(path: &str) -> String {
    let path = path.split('?').next().unwrap_or_default();
    path.split('/')
        .map(|part| if part.starts_with('{') { "{}" } else { part })
        .collect::<Vec<_>>()
        .join("/")
}

/// The (method, path template) pairs of the OpenAPI document.
fn openapi_routes(document: &Value) -> Vec<(String, String)> {
    let paths = document["paths"].as_object().expect("paths");
    let mut routes = Vec::new();
    for (path, item) in paths {
        for method in item.as_object().expect("a path item").keys() {
            routes.push((method.clone(), path.clone()));
        }
    }
    routes
}

/// Whether the router serves a route: not a 405, nor a 404 other than a handler's JSON
/// error (the router's fallback answers `unknown_route`).
fn served(reply: &Reply) -> bool {
    let json_error = serde_json::from_slice::<Value>(&reply.body)
        .is_ok_and(|body| body["code"].is_string() && body["code"] != "unknown_route");
    reply.status != 405 && (reply.status != 404 || json_error)
}

/// A concrete request for a route template.
fn concrete(method: &str, template: &str) -> String {
    let table = if method == "delete" && template == "/v1/tables/{table}" {
        "scratch"
    } else {
        "t"
    };
    let path = template
        .replace("{table}", table)
        .replace("{key}", "k1")
        .replace("{name}", "doc");
    match path.rsplit('/').next() {
        Some("extract") => path + "?offset=0&len=4",
        Some("count" | "search") if path.starts_with("/v1/texts") => path + "?pattern=an",
        Some("range") => path + "?lo=an&hi=ba",
        Some("wildcard") => path + "?prefix=an&suffix=a&max_gap=2",
        _ => path,
    }
}

#[test]
fn openapi_routes_are_served_and_texts_match_their_bytes() {
    let server = Server::start(&[]);
    let api = server.client(None);
    for name in ["t", "scratch"] {
        api.post_json("/v1/tables", &table_request(name))
            .expect(201);
    }
    api.post_json("/v1/tables/t/records", &json!([{"id": "k1", "qty": 1}]))
        .expect(200);
    let text = generate_text(11, 40_000);
    let uploaded = api
        .post("/v1/texts/doc", "application/octet-stream", &text)
        .expect(201);
    assert_eq!(uploaded["name"], "doc");
    assert_eq!(uploaded["bytes"], text.len());
    assert!(uploaded["index_bytes"].is_u64(), "{uploaded}");
    check_text(&api, "doc", &text);

    let document = api.get("/openapi.json").expect(200);
    assert!(document["openapi"]
        .as_str()
        .is_some_and(|v| v.starts_with("3.")));
    let routes = openapi_routes(&document);
    let listed: BTreeSet<(String, String)> = routes
        .iter()
        .map(|(method, path)| (method.clone(), normalize(path)))
        .collect();
    assert_eq!(
        listed,
        documented_routes(),
        "OpenAPI and docs/http.md list other routes"
    );
    for (method, template) in &routes {
        let path = concrete(method, template);
        let body = (method == "post").then_some(("application/json", b"{}".as_slice()));
        let reply = api.send(&method.to_uppercase(), &path, body);
        assert!(served(&reply), "{method} {path} is not served: {reply:?}");
        assert!(reply.status < 500, "{method} {path}: {}", reply.text());
    }
    for (method, path) in [
        ("PATCH", "/v1/tables"),
        ("GET", "/v1/nothing"),
        ("PUT", "/health"),
    ] {
        let reply = api.send(method, path, None);
        assert!(
            !served(&reply),
            "{method} {path} should not be served: {reply:?}"
        );
    }
    expect_error(&api.get("/v1/tables/scratch"), 404, "unknown_table");
    expect_error(&api.get("/v1/tables/t/records/k1"), 404, "not_found");
    check_text(&api, "doc", &text);
}

/// Range and wildcard searches with PUFFER_MAX_RESULT_ROWS=100: answers within the
/// limits match a scan of the uploaded bytes (also bytes that are not UTF-8); missing or
/// malformed parameters are 400, answers that could exceed the limit 413.
#[test]
fn text_range_and_wildcard_within_limits() {
    let server = Server::start(&[("PUFFER_MAX_RESULT_ROWS", "100")]);
    let api = server.client(None);
    let text = generate_text(29, 3000);
    api.post("/v1/texts/doc", "text/plain", &text).expect(201);

    // Small answers are served whole; with a limit, large ones too.
    check_range(&api, "doc", &text, b"bandana", b"bandana");
    check_range(&api, "doc", &text, b"coral", b"coral");
    check_wildcard(&api, "doc", &text, b"coral", b"reef", 20);
    check_wildcard(&api, "doc", &text, b"puffer", b"fish", 0);
    let all = naive_range(&text, b"", b"");
    assert!(all.len() > 100);
    let limited = api.get("/v1/texts/doc/range?lo=&hi=&limit=100").expect(200);
    assert_eq!(limited["offsets"], json!(all[..100]));
    let message = expect_error(
        &api.get("/v1/texts/doc/range?lo=&hi="),
        413,
        "limit_exceeded",
    );
    assert!(message.contains("give a limit"), "{message}");
    // Frequent enough prefix and suffix (at most 100 each), but more than 100 matches.
    let (prefix, suffix, gap) = (b"puffer", b"fish", 1000);
    assert!(naive_occurrences(&text, prefix).len() <= 100);
    assert!(naive_occurrences(&text, suffix).len() <= 100);
    let expected = naive_wildcard(&text, prefix, suffix, gap);
    assert!(expected.len() > 100, "{} matches", expected.len());
    let path = format!("/v1/texts/doc/wildcard?prefix=puffer&suffix=fish&max_gap={gap}");
    let message = expect_error(&api.get(&path), 413, "limit_exceeded");
    assert!(message.contains("give a limit"), "{message}");
    let limited = api.get(&format!("{path}&limit=100")).expect(200);
    assert_eq!(limited["matches"], wildcard_json(&expected[..100]));
    // A prefix or suffix with more than 100 occurrences is refused, whatever the limit.
    assert!(naive_occurrences(&text, b"a").len() > 100);
    for path in [
        "/v1/texts/doc/wildcard?prefix=a&suffix=fish&max_gap=3",
        "/v1/texts/doc/wildcard?prefix=fish&suffix=a&max_gap=3&limit=1",
    ] {
        let message = expect_error(&api.get(path), 413, "limit_exceeded");
        assert!(message.contains("occurs"), "{message}");
    }

    // Bytes that are not UTF-8, percent-encoded.
    let mut rng = XorShift(77);
    let binary: Vec<u8> = (0..2000)
        .map(|_| [0x00, 0x7f, 0x80, 0xff, b'a'][rng.below(5) as usize])
        .collect();
    api.post("/v1/texts/bin", "application/octet-stream", &binary)
        .expect(201);
    for (lo, hi) in [
        (&[0xffu8, 0x00, 0x80][..], &[0xffu8, 0x00, 0xff][..]),
        (&[0x80, 0x7f, 0x00], &[0x80, 0x7f, b'a']),
        (&[0x00, 0x00, 0x00], &[0x00, 0x00, 0x7f]),
        (&[0xff, 0xff, 0xff], &[0xff]),
    ] {
        check_range(&api, "bin", &binary, lo, hi);
    }
    check_wildcard(
        &api,
        "bin",
        &binary,
        &[0xff, 0x00, b'a'],
        &[0x80, 0x80, 0x7f],
        40,
    );
    check_wildcard(
        &api,
        "bin",
        &binary,
        &[0x00, b'a', 0xff],
        &[0xff, 0xff, 0x00],
        6,
    );

    // Malformed requests.
    let invalid = [
        "/v1/texts/doc/range?hi=b",
        "/v1/texts/doc/range?lo=a",
        "/v1/texts/doc/range",
        "/v1/texts/doc/range?lo=a&hi=b&limit=ten",
        "/v1/texts/doc/range?lo=a&hi=b&limit=-1",
        "/v1/texts/doc/range?lo=a&hi=b&pattern=a",
        "/v1/texts/doc/range?lo=%G0&hi=b",
        "/v1/texts/doc/wildcard?suffix=fish&max_gap=1",
        "/v1/texts/doc/wildcard?prefix=puffer&max_gap=1",
        "/v1/texts/doc/wildcard?prefix=puffer&suffix=fish",
        "/v1/texts/doc/wildcard?prefix=puffer&suffix=fish&max_gap=",
        "/v1/texts/doc/wildcard?prefix=puffer&suffix=fish&max_gap=-1",
        "/v1/texts/doc/wildcard?prefix=puffer&suffix=fish&max_gap=1.5",
        "/v1/texts/doc/wildcard?prefix=puffer&suffix=fish&max_gap=two",
        "/v1/texts/doc/wildcard?prefix=&suffix=fish&max_gap=1",
        "/v1/texts/doc/wildcard?prefix=puffer&suffix=&max_gap=1",
        "/v1/texts/doc/wildcard?prefix=puffer&suffix=fish&max_gap=1&gap=2",
    ];
    for path in invalid {
        let message = expect_error(&api.get(path), 400, "invalid_request");
        if path.contains("max_gap=") && !path.contains("max_gap=1") {
            assert!(message.contains("max_gap"), "{path}: {message}");
        }
    }
    for (path, parameter) in [
        ("/v1/texts/doc/range?hi=b", "lo"),
        ("/v1/texts/doc/range?lo=a", "hi"),
        ("/v1/texts/doc/wildcard?suffix=fish&max_gap=1", "prefix"),
        ("/v1/texts/doc/wildcard?prefix=puffer&max_gap=1", "suffix"),
        (
            "/v1/texts/doc/wildcard?prefix=puffer&suffix=fish",
            "max_gap",
        ),
    ] {
        let message = expect_error(&api.get(path), 400, "invalid_request");
        assert!(message.contains(parameter), "{path}: {message}");
    }
    for path in [
        "/v1/texts/doc/range?lo=a&hi=b&limit=101",
        "/v1/texts/doc/wildcard?prefix=puffer&suffix=fish&max_gap=1&limit=101",
    ] {
        expect_error(&api.get(path), 413, "limit_exceeded");
    }
    check_range(&api, "doc", &text, b"bandana", b"bandana");
}

/// The value of a Prometheus counter line (0 when absent).
fn counter(metrics: &str, series: &str) -> u64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn health_ready_and_metrics() {
    let server = Server::start(&[]);
    let api = server.client(None);
    assert_eq!(api.get("/health").expect(200), json!({"status": "ok"}));
    api.post_json("/v1/tables", &table_request("t")).expect(201);
    assert_eq!(api.get("/ready").expect(200)["status"], "ready");
    let series = r#"puffer_http_requests_total{method="GET",route="/v1/tables",status="200"}"#;
    let before = api.get("/metrics");
    assert_eq!(before.status, 200);
    assert!(
        before.text().contains("puffer_http_requests_total"),
        "{}",
        before.text()
    );
    let start = counter(&before.text(), series);
    for _ in 0..3 {
        api.get("/v1/tables").expect(200);
    }
    let after = api.get("/metrics").text();
    assert_eq!(counter(&after, series), start + 3, "{after}");
    let health = r#"puffer_http_requests_total{method="GET",route="/health",status="200"}"#;
    assert_eq!(counter(&after, health), 1, "{after}");
}

/// With PUFFER_MAX_CONCURRENT_REQUESTS=1, a request arriving while another is being
/// served (a large text being indexed) is refused with 429 overloaded and Retry-After,
/// instead of queueing; once the first is done, requests are served again.
#[test]
fn requests_beyond_the_concurrency_limit_are_refused() {
    let server = Server::start(&[("PUFFER_MAX_CONCURRENT_REQUESTS", "1")]);
    let api = server.client(None);
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let text: Vec<u8> = (0..24 << 20)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            b"acgt"[(seed % 4) as usize]
        })
        .collect();
    let uploader = server.client(None);
    let (refused, uploaded) = std::thread::scope(|scope| {
        let upload = scope.spawn(|| uploader.post("/v1/texts/big", "text/plain", &text));
        // Let the upload take the one permit first: a poll that won the race would get the
        // upload refused (and its connection closed mid-body) instead.
        std::thread::sleep(std::time::Duration::from_millis(200));
        let mut refused = None;
        while !upload.is_finished() && refused.is_none() {
            let reply = api.get("/v1/tables");
            if reply.status == 429 {
                refused = Some(reply);
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        (refused, upload.join().unwrap())
    });
    uploaded.expect(201);
    let refused = refused.expect("a request during the upload must be refused");
    assert_eq!(refused.json()["code"], json!("overloaded"));
    assert_eq!(refused.json()["retryable"], json!(true));
    api.get("/v1/tables").expect(200);
}

// ---------------------------------------------------------------------------------------
// Shards, replicas and the adaptive node
// ---------------------------------------------------------------------------------------

/// Runs the `puffer` binary; returns (success, stdout, stderr).
fn run_cli(args: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_puffer"))
        .args(args)
        .output()
        .expect("cannot run puffer");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn sharded_tables_replicas_status_and_manual_layers() {
    let server = Server::start(&[]);
    let api = server.client(None);
    let mut request =
        json!({"name": "s", "key": "id", "attributes": [{"name": "city", "type": "string"}]});
    request["shards"] = json!(2);
    request["replicas"] = json!(2);
    let description = api.post_json("/v1/tables", &request).expect(201);
    assert_eq!(
        (
            description["shards"].clone(),
            description["replicas"].clone()
        ),
        (json!(2), json!(2))
    );
    let bad = api.post_json(
        "/v1/tables",
        &json!({"name": "b", "key": "id", "shards": 0}),
    );
    expect_error(&bad, 400, "invalid_request");

    // Records spread over both shards come back whole, in key order.
    let records: Vec<Value> = (0..40)
        .map(
            |i| json!({"id": format!("k{i:02}"), "city": if i % 2 == 0 { "oslo" } else { "rome" }}),
        )
        .collect();
    api.post(
        "/v1/tables/s/records",
        "application/x-ndjson",
        &jsonl(&records),
    )
    .expect(200);
    let found = api
        .post_json(
            "/v1/tables/s/search",
            &json!({"where": {"eq": {"city": "rome"}}}),
        )
        .expect(200);
    let keys: Vec<String> = found["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect();
    let expected: Vec<String> = (0..40)
        .filter(|i| i % 2 == 1)
        .map(|i| format!("k{i:02}"))
        .collect();
    assert_eq!(keys, expected);
    for i in [0, 17, 39] {
        let got = api
            .get(&format!("/v1/tables/s/records/k{i:02}"))
            .expect(200);
        assert_eq!(got["record"], records[i]);
    }

    // The node shows four replicas of table s; the CLI prints them.
    let node = api.get("/v1/admin/replicas").expect(200);
    let replicas: Vec<&Value> = node["replicas"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["table"] == "s")
        .collect();
    assert_eq!(replicas.len(), 4);
    let (ok, stdout, stderr) = run_cli(&["status", "--json", "--url", &server.base]);
    assert!(ok, "{stderr}");
    let status: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        status["node"]["replicas"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["table"] == "s")
            .count(),
        4
    );
    let (ok, stdout, _) = run_cli(&["status", "--url", &server.base]);
    assert!(
        ok && stdout.contains("avg queue") && stdout.contains(" s "),
        "{stdout}"
    );

    // Manual layer changes pin a replica (the layer manager leaves it alone); `auto`
    // hands it back; unknown replicas and actions are refused.
    let id = replicas[0]["id"].as_u64().unwrap();
    // Its records are still in the log stage: no segment, so no layer to add.
    let (ok, _, stderr) = run_cli(&[
        "layer",
        "add",
        "--replica",
        &id.to_string(),
        "--url",
        &server.base,
    ]);
    assert!(!ok && stderr.contains("at most 1 layer"), "{stderr}");
    let (ok, stdout, stderr) = run_cli(&[
        "layer",
        "drop",
        "--replica",
        &id.to_string(),
        "--url",
        &server.base,
    ]);
    assert!(ok, "{stderr}");
    let answer: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(answer["pinned"], true);
    let pinned = api.get("/v1/admin/replicas").expect(200);
    let me = pinned["replicas"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id)
        .unwrap()
        .clone();
    assert_eq!(me["pinned"], true);
    let (ok, _, stderr) = run_cli(&[
        "layer",
        "auto",
        "--replica",
        &id.to_string(),
        "--url",
        &server.base,
    ]);
    assert!(ok, "{stderr}");
    let auto = api.get("/v1/admin/replicas").expect(200);
    assert_eq!(
        auto["replicas"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == id)
            .unwrap()["pinned"],
        false
    );
    let (ok, _, stderr) = run_cli(&["layer", "drop", "--replica", "9999", "--url", &server.base]);
    assert!(!ok && stderr.contains("no replica 9999"), "{stderr}");
    let bad = api.post_json(
        &format!("/v1/admin/replicas/{id}/layers"),
        &json!({"action": "grow"}),
    );
    expect_error(&bad, 400, "invalid_request");

    // Attribute layers by hand: kept, shown with the pin, handed back.
    // `city`'s row in the replica's list `list` (`attribute_layers`, `column_layers`).
    let city_row = |api: &Client, list: &str| {
        api.get("/v1/admin/replicas").expect(200)["replicas"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == id)
            .unwrap()[list]
            .as_array()
            .unwrap()
            .iter()
            .find(|row| row["name"] == "city")
            .cloned()
    };
    // The row once the node shows it (the kept layers' next tick), kept and targeted.
    let kept_row = |api: &Client, list: &str| {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let row = loop {
            match city_row(api, list) {
                Some(row) => break row,
                None if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100))
                }
                None => panic!("no {list} row for the kept attribute"),
            }
        };
        assert_eq!(
            (row["pin"].clone(), row["target"].clone()),
            (json!("keep"), json!(true)),
            "{row}"
        );
    };
    let url = format!("/v1/admin/replicas/{id}/attribute-layers");
    let kept = api
        .post_json(&url, &json!({"attribute": "city", "action": "keep"}))
        .expect(200);
    assert_eq!(
        kept,
        json!({"id": id, "attribute": "city", "kind": "attribute", "pin": "keep"})
    );
    // Column layers the same way, by kind; a kind that does not exist is refused.
    let bad_kind = api.post_json(
        &url,
        &json!({"attribute": "city", "action": "keep", "kind": "row"}),
    );
    expect_error(&bad_kind, 400, "invalid_request");
    let kept_column = api
        .post_json(
            &url,
            &json!({"attribute": "city", "action": "keep", "kind": "column"}),
        )
        .expect(200);
    assert_eq!(
        kept_column,
        json!({"id": id, "attribute": "city", "kind": "column", "pin": "keep"})
    );
    kept_row(&api, "column_layers");
    kept_row(&api, "attribute_layers");
    let auto = api
        .post_json(&url, &json!({"attribute": "city", "action": "auto"}))
        .expect(200);
    assert_eq!(auto["pin"], Value::Null);
    assert_eq!(
        city_row(&api, "attribute_layers").map(|row| row["pin"].clone()),
        Some(Value::Null)
    );
    for (body, status, code) in [
        (
            json!({"attribute": "city", "action": "grow"}),
            400,
            "invalid_request",
        ),
        (
            json!({"attribute": "nope", "action": "keep"}),
            400,
            "invalid_request",
        ),
        (json!({"attribute": "city"}), 400, "bad_json"),
    ] {
        expect_error(&api.post_json(&url, &body), status, code);
    }
    expect_error(
        &api.post_json(
            "/v1/admin/replicas/9999/attribute-layers",
            &json!({"attribute": "city", "action": "keep"}),
        ),
        404,
        "unknown_replica",
    );
    // The same from the command line.
    let replica = id.to_string();
    let cli = |action: &str, attribute: Option<&str>| {
        let mut args = vec![
            "layer",
            action,
            "--replica",
            &replica,
            "--url",
            &server.base,
        ];
        if let Some(attribute) = attribute {
            args.extend(["--attribute", attribute]);
        }
        run_cli(&args)
    };
    let (ok, _, stderr) = cli("keep", Some("city"));
    assert!(ok, "{stderr}");
    assert_eq!(
        city_row(&api, "attribute_layers").map(|row| row["pin"].clone()),
        Some(json!("keep"))
    );
    let (ok, _, stderr) = cli("auto", Some("city"));
    assert!(ok, "{stderr}");
    assert_eq!(
        city_row(&api, "attribute_layers").map(|row| row["pin"].clone()),
        Some(Value::Null)
    );
    let (ok, _, stderr) = cli("keep", None);
    assert!(!ok && stderr.contains("give --attribute"), "{stderr}");
    let (ok, _, stderr) = cli("add", Some("city"));
    assert!(!ok && stderr.contains("not added"), "{stderr}");
    let history = api.get("/v1/admin/history?last_s=60").expect(200);
    assert!(history["replicas"].as_array().unwrap().len() >= 4);
    expect_error(
        &api.get("/v1/admin/history?last_s=-1"),
        400,
        "invalid_request",
    );

    // Reopened, the table keeps its layout and records.
    let server = server.restart();
    let api = server.client(None);
    let description = api.get("/v1/tables/s").expect(200);
    assert_eq!(
        (
            description["shards"].clone(),
            description["replicas"].clone()
        ),
        (json!(2), json!(2))
    );
    let count = api
        .post_json("/v1/tables/s/search", &json!({"count": true}))
        .expect(200);
    assert_eq!(count["count"], 40);
}

#[test]
fn unknown_routes_and_methods_answer_json_errors() {
    let server = Server::start(&[]);
    let api = server.client(None);
    let message = expect_error(&api.get("/v1/no/such/route"), 404, "unknown_route");
    assert!(message.contains("/v1/no/such/route"), "{message}");
    let message = expect_error(&api.delete("/v1/sql"), 405, "method_not_allowed");
    assert!(message.contains("DELETE"), "{message}");
    // The API still answers afterwards.
    api.get("/health").expect(200);
}

// ---------------------------------------------------------------------------------------
// Hostile requests
// ---------------------------------------------------------------------------------------

/// The least role a route of the OpenAPI document needs, as docs/http.md says (`None`:
/// no token). SQL is sent as a SELECT (statements' own roles: see
/// `tokens_grant_roles_and_refusals_change_nothing`).
fn role_needed(method: &str, path: &str) -> Option<usize> {
    const READ: usize = 1;
    const WRITE: usize = 2;
    const ADMIN: usize = 3;
    Some(match (method, path) {
        (_, "/" | "/health" | "/ready" | "/metrics" | "/openapi.json") => return None,
        ("get", _) | ("post", "/v1/sql" | "/v1/tables/{table}/search") => READ,
        ("post", "/v1/tables/{table}/records" | "/v1/batches")
        | ("delete", "/v1/tables/{table}/records/{key}") => WRITE,
        _ => ADMIN,
    })
}

/// A request to `path` of the document (parameters filled in) with a body that would
/// change something if it were let through.
fn route_request(client: &Client, method: &str, path: &str, table: &str) -> Reply {
    let path = path
        .replace("{table}", table)
        .replace("{key}", "a000")
        .replace("{name}", "doc")
        .replace("{id}", "0");
    let body: Option<Value> = match (method, path.as_str()) {
        ("post", "/v1/sql") => Some(json!({"query": format!("SELECT COUNT(*) FROM {table}")})),
        ("post", "/v1/tables") => Some(table_request("u")),
        ("post", "/v1/batches") => {
            Some(json!({"operations": [{"table": table, "delete": "a001"}]}))
        }
        ("post", p) if p.ends_with("/records") => Some(json!([{"id": "evil", "qty": 1}])),
        ("post", p) if p.ends_with("/search") => Some(json!({"count": true})),
        ("post", p) if p.ends_with("/layers") => Some(json!({"action": "drop"})),
        ("put", "/v1/admin/budget") => Some(json!({"memory_budget_bytes": 1u64 << 30})),
        ("post", p) if p.ends_with("/subspaces") => {
            Some(json!({"attributes": ["qty"], "regions": 4}))
        }
        ("put", "/v1/admin/hyperspace/calibration") => Some(
            json!({"beta_s_per_object": 1e-6, "region_cost_s": 1e-5, "alpha": 1.0, "max_throughput_ops_per_s": 1000.0}),
        ),
        _ => None,
    };
    match (method, body) {
        ("post", None) => client.post(&path, "text/plain", b"some text"),
        (method, Some(body)) => client.send(
            &method.to_uppercase(),
            &path,
            Some(("application/json", body.to_string().as_bytes())),
        ),
        (method, None) => client.send(&method.to_uppercase(), &path, None),
    }
}

/// Every route of the server's own OpenAPI document, with no token, a wrong one and each
/// role: refused (401, 403) exactly where the role is short, and a refusal changes
/// nothing; let through everywhere else.
#[test]
fn every_documented_route_refuses_exactly_the_roles_it_must() {
    let server = Server::start(&[
        ("PUFFER_READ_TOKEN", READ_TOKEN),
        ("PUFFER_WRITE_TOKEN", WRITE_TOKEN),
        ("PUFFER_ADMIN_TOKEN", ADMIN_TOKEN),
    ]);
    let clients = [
        ("no token", server.client_without_keep_alive(None), 0),
        (
            "a wrong token",
            server.client_without_keep_alive(Some("nope")),
            0,
        ),
        ("read", server.client(Some(READ_TOKEN)), 1),
        ("write", server.client(Some(WRITE_TOKEN)), 2),
        ("admin", server.client(Some(ADMIN_TOKEN)), 3),
    ];
    let admin = &clients[4].1;
    admin
        .post_json("/v1/tables", &table_request("t"))
        .expect(201);
    put_rows(&clients[3].1, &random_rows(9, "a", 10));
    let before = table_state(admin);
    let document = clients[0].1.get("/openapi.json").expect(200);
    let mut routes: Vec<(String, String)> = Vec::new();
    for (path, methods) in document["paths"].as_object().unwrap() {
        for method in methods.as_object().unwrap().keys() {
            routes.push((method.clone(), path.clone()));
        }
    }
    assert!(
        routes.len() >= 25,
        "the document lists {} routes",
        routes.len()
    );
    let mut refused = 0;
    for (who, client, level) in &clients {
        for (method, path) in &routes {
            let needed = role_needed(method, path);
            let short = needed.is_some_and(|n| *level < n);
            // Let through, a request goes to a table that does not exist: it is not
            // refused for its token, and changes nothing either.
            let table = if short { "t" } else { "nosuch" };
            let reply = route_request(client, method, path, table);
            let context = format!("{method} {path} with {who}: {}", reply.status);
            if short {
                let code = if *level == 0 {
                    "unauthorized"
                } else {
                    "forbidden"
                };
                let status = if *level == 0 { 401 } else { 403 };
                expect_error(&reply, status, code);
                refused += 1;
            } else {
                assert!(
                    ![401, 403].contains(&reply.status),
                    "{context}: {}",
                    reply.text()
                );
            }
        }
        if *level < 3 {
            // (The admin is refused nothing: its requests go through, a table made.)
            assert_eq!(
                table_state(admin),
                before,
                "a refused request with {who} changed the data"
            );
            expect_error(
                &admin.get("/v1/texts/doc/count?pattern=a"),
                404,
                "unknown_text",
            );
        }
    }
    // 28 routes need a token; the read and write tokens fall short on some.
    assert!(refused > 2 * 28, "only {refused} refusals");
}

/// The code of a refusal with 400 or 413 (`what` names the request in a failure).
fn refused_code(reply: &Reply, what: &str) -> String {
    assert!(
        [400, 413].contains(&reply.status),
        "{what}: {} {}",
        reply.status,
        reply.text()
    );
    reply.json()["code"].as_str().unwrap_or("").to_string()
}

/// Every file under `dir` (its path from `dir`).
fn files_under(dir: &std::path::Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&at) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path.clone());
            }
            out.insert(path.strip_prefix(dir).unwrap().display().to_string());
        }
    }
    out
}

/// Names that reach for the file system (`..`, `/`, NUL, control characters, 10,000
/// bytes) are refused before any file is made; JSON, SQL and predicates nested without
/// end, and headers and URLs past a limit, are refused with an error, never a crash.
#[test]
fn hostile_names_nesting_and_sizes_are_refused_and_touch_nothing() {
    let holder = TempDir::new().unwrap();
    let data = holder.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let server = Server::start_in(TempDir::new_in(&data).unwrap(), &[]);
    let api = server.client(None);
    api.post_json("/v1/tables", &table_request("t")).expect(201);
    put_rows(&api, &random_rows(10, "a", 10));
    let before = table_state(&api);
    let files_before = files_under(holder.path());

    let long = "z".repeat(10_000);
    let names = [
        "..",
        ".",
        "../zz9",
        "zz9/../../zz9",
        "zz9/x",
        "/zz9",
        "zz9\0",
        "zz9\u{1}",
        "zz9\n",
        "zz9\\..",
        "",
        &long,
    ];
    for name in names {
        let reply = api.post_json("/v1/tables", &table_request(name));
        expect_error(&reply, 400, "invalid_request");
        let sql = format!(
            "CREATE TABLE \"{}\" (id TEXT PRIMARY KEY, n INT)",
            name.replace('"', "\"\"")
        );
        let code = refused_code(&api.sql(&sql), &format!("CREATE TABLE {name:?}"));
        assert!(
            ["invalid_request", "syntax_error", "limit_exceeded"].contains(&code.as_str()),
            "CREATE TABLE {name:?}: {code}"
        );
    }
    // Text names arrive in the path, percent-encoded.
    for name in [
        "..",
        "%2E%2E",
        "zz9%2F..%2F..%2Fzz9",
        "zz9%00",
        "zz9%01",
        "zz9%0A",
        &long,
    ] {
        let reply = api.post(&format!("/v1/texts/{name}"), "text/plain", b"abc");
        assert!(
            [400, 404, 414, 431].contains(&reply.status),
            "text {name:?}: {} {}",
            reply.status,
            reply.text()
        );
    }
    let files_after = files_under(holder.path());
    assert_eq!(
        files_after.iter().filter(|f| f.contains("zz9")).count(),
        0,
        "{files_after:?}"
    );
    assert!(
        files_after
            .difference(&files_before)
            .all(|f| !f.contains("texts")),
        "a text was stored: {:?}",
        files_after.difference(&files_before).collect::<Vec<_>>()
    );

    // Nesting past what any parser should follow.
    let deep_json = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let reply = api.post(
        "/v1/tables/t/records",
        "application/json",
        deep_json.as_bytes(),
    );
    expect_error(&reply, 400, "bad_json");
    // Written out as text: a `Value` that deep would overflow this test's own stack.
    let body = format!(
        "{{\"count\": true, \"where\": {}{{\"eq\": {{\"qty\": 1}}}}{}}}",
        "{\"not\": ".repeat(100_000),
        "}".repeat(100_000)
    );
    let reply = api.post("/v1/tables/t/search", "application/json", body.as_bytes());
    assert!(
        [400, 413].contains(&reply.status),
        "a deep predicate: {}",
        reply.status
    );
    for depth in [100, 10_000, 200_000] {
        let sql = format!(
            "SELECT COUNT(*) FROM t WHERE {}qty = 1{}",
            "(".repeat(depth),
            ")".repeat(depth)
        );
        let code = refused_code(&api.sql(&sql), &format!("SQL nested {depth} deep"));
        assert!(
            ["syntax_error", "limit_exceeded", "unsupported"].contains(&code.as_str()),
            "SQL nested {depth} deep: {code}"
        );
    }

    // A header and a URL of a megabyte: refused at the door.
    let huge = "h".repeat(1 << 20);
    let reply = api
        .agent
        .get(&format!("{}/v1/tables", server.base))
        .set("X-Huge", &huge)
        .call();
    let status = match reply {
        Ok(r) | Err(ureq::Error::Status(_, r)) => r.status(),
        Err(e) => panic!("a huge header got no answer: {e}"),
    };
    assert_eq!(status, 431, "a 1 MB header");
    let reply = api
        .agent
        .get(&format!("{}/v1/tables/{huge}", server.base))
        .call();
    let status = match reply {
        Ok(r) | Err(ureq::Error::Status(_, r)) => r.status(),
        Err(e) => panic!("a huge URL got no answer: {e}"),
    };
    assert!([414, 431].contains(&status), "a 1 MB URL: {status}");

    // The server stands, and nothing changed.
    api.get("/health").expect(200);
    assert_eq!(table_state(&api), before);
}
