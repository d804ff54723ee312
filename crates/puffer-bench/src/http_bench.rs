//! `puffer-bench http`: mixed get / search / put traffic from N keep-alive connections
//! (driven from one event-loop thread) against a running server, keys drawn from a Zipf distribution; throughput and latency
//! quantiles per operation, every answer checked (a get must return the key asked for, a
//! search's rows must satisfy its predicate).

use std::borrow::Cow;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::stats::{quantile_us, round};

#[derive(clap::Args)]
pub struct HttpArgs {
    /// Server URL.
    #[arg(long, default_value = "http://127.0.0.1:7878")]
    url: String,
    /// Table to query (it must exist and hold records).
    #[arg(long)]
    table: String,
    /// Client threads.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Duration of the measurement.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// The same traffic before the measurement, not counted (caches, connections and
    /// the server's write pipeline reach their steady state); its errors still count.
    #[arg(long, default_value_t = 3)]
    warmup_seconds: u64,
    /// Percent of gets (the rest split between searches and puts).
    #[arg(long, default_value_t = 75)]
    get_percent: u32,
    /// Percent of searches (equality on a column, first 10 keys).
    #[arg(long, default_value_t = 20)]
    search_percent: u32,
    /// Zipf exponent of key popularity.
    #[arg(long, default_value_t = 0.99)]
    zipf: f64,
    /// Keys sampled from the table to draw from.
    #[arg(long, default_value_t = 10_000)]
    keys: usize,
    /// Random seed.
    #[arg(long, default_value_t = 42)]
    seed: u64,
}

/// What the clients work on: records sampled from the table.
struct Workload {
    /// `host:port` of the server.
    authority: String,
    table: String,
    key_column: String,
    records: Vec<Value>,
    /// Columns with short string values, for equality searches.
    search_columns: Vec<String>,
    zipf_weights: Vec<f64>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Operation {
    Get,
    Search,
    Put,
}

#[derive(Default)]
struct ClientReport {
    latencies: [Vec<Duration>; 3],
    errors: Vec<String>,
}

/// A response body as JSON. The body is read whole and parsed from memory: parsing
/// from the reader goes byte by byte and costs the client more than the request.
fn json_body(response: ureq::Response, url: &str) -> anyhow::Result<Value> {
    let mut text = String::new();
    std::io::Read::read_to_string(&mut response.into_reader(), &mut text)
        .with_context(|| format!("{url}: reading the response"))?;
    serde_json::from_str(&text).with_context(|| format!("{url}: the response is not JSON"))
}

fn post(agent: &ureq::Agent, url: &str, body: &Value) -> anyhow::Result<Value> {
    let request = agent.post(url).set("Content-Type", "application/json");
    match request.send_string(&body.to_string()) {
        Ok(response) => json_body(response, url),
        Err(ureq::Error::Status(status, response)) => {
            let text = response.into_string().unwrap_or_default();
            bail!("{url}: status {status}: {text}")
        }
        Err(e) => bail!("{url}: {e}"),
    }
}

fn get(agent: &ureq::Agent, url: &str) -> anyhow::Result<Value> {
    match agent.get(url).call() {
        Ok(response) => json_body(response, url),
        Err(ureq::Error::Status(status, response)) => {
            let text = response.into_string().unwrap_or_default();
            bail!("{url}: status {status}: {text}")
        }
        Err(e) => bail!("{url}: {e}"),
    }
}

impl Workload {
    fn prepare(args: &HttpArgs) -> anyhow::Result<Workload> {
        let agent = ureq::AgentBuilder::new().build();
        let url = args.url.trim_end_matches('/').to_string();
        let authority = url
            .strip_prefix("http://")
            .filter(|rest| !rest.is_empty() && !rest.contains('/'))
            .with_context(|| {
                format!("--url must be http://HOST:PORT (no path, no TLS), got {url:?}")
            })?
            .to_string();
        let description = get(&agent, &format!("{url}/v1/tables/{}", args.table))
            .context("describing the table")?;
        let key_column = description["key"]
            .as_str()
            .context("the table description has no key")?
            .to_string();
        let answer = post(
            &agent,
            &format!("{url}/v1/sql"),
            &json!({"query": format!("SELECT * FROM {} LIMIT {}", args.table, args.keys)}),
        )?;
        let records = answer["rows"].as_array().cloned().unwrap_or_default();
        ensure!(!records.is_empty(), "table {} holds no records", args.table);
        let search_columns = short_string_columns(&description, &records);
        let zipf_weights = (1..=records.len())
            .map(|rank| 1.0 / (rank as f64).powf(args.zipf))
            .collect();
        Ok(Workload {
            authority,
            table: args.table.clone(),
            key_column,
            records,
            search_columns,
            zipf_weights,
        })
    }

    fn pick_record(&self, rng: &mut StdRng, cumulative: &[f64]) -> &Value {
        let target = rng.gen::<f64>() * cumulative.last().copied().unwrap_or(1.0);
        let at = cumulative.partition_point(|&c| c < target);
        &self.records[at.min(self.records.len() - 1)]
    }
}

fn short_string_columns(description: &Value, records: &[Value]) -> Vec<String> {
    let attributes = description["attributes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    attributes
        .iter()
        .filter(|a| a["type"] == "string")
        .filter_map(|a| a["name"].as_str().map(str::to_string))
        .filter(|name| {
            let lengths: Vec<usize> = records
                .iter()
                .filter_map(|r| r[name].as_str().map(str::len))
                .collect();
            !lengths.is_empty() && lengths.iter().sum::<usize>() / lengths.len() < 40
        })
        .collect()
}

fn pick_operation(rng: &mut StdRng, args: &HttpArgs) -> Operation {
    let roll = rng.gen_range(0..100);
    if roll < args.get_percent {
        Operation::Get
    } else if roll < args.get_percent + args.search_percent {
        Operation::Search
    } else {
        Operation::Put
    }
}

fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Longest wait for one answer before the request counts as an error.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Largest response the client accepts (a search answer of 10 rows is a few KB).
const MAX_RESPONSE_BYTES: usize = 1 << 24;

/// One keep-alive HTTP/1.1 connection, spoken directly: each request is written as
/// bytes and its response parsed with `httparse`, one request at a time. The load
/// generator shares the machine with the server it measures, so it keeps its own CPU
/// per request small (a general HTTP client library spent about twice as much).
struct Connection {
    stream: TcpStream,
    request: Vec<u8>,
    response: Vec<u8>,
}

impl Connection {
    async fn open(authority: &str) -> anyhow::Result<Connection> {
        let stream = TcpStream::connect(authority)
            .await
            .with_context(|| format!("connecting to {authority}"))?;
        stream.set_nodelay(true)?;
        Ok(Connection {
            stream,
            request: Vec::with_capacity(1024),
            response: Vec::with_capacity(16 * 1024),
        })
    }

    /// Sends one request and returns the body of its response; a status other than 2xx,
    /// a body without `Content-Length`, or a closed connection is an error.
    async fn call(
        &mut self,
        method: &str,
        path: &str,
        host: &str,
        body: Option<&[u8]>,
    ) -> anyhow::Result<&[u8]> {
        use std::io::Write;
        self.request.clear();
        write!(self.request, "{method} {path} HTTP/1.1\r\nHost: {host}\r\n")?;
        if let Some(body) = body {
            write!(
                self.request,
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                body.len()
            )?;
        }
        self.request.extend_from_slice(b"\r\n");
        self.request.extend_from_slice(body.unwrap_or_default());
        self.stream
            .write_all(&self.request)
            .await
            .with_context(|| format!("{method} {path}: sending"))?;
        self.response.clear();
        let (header_len, status, body_len) = loop {
            if self
                .stream
                .read_buf(&mut self.response)
                .await
                .with_context(|| format!("{method} {path}: reading"))?
                == 0
            {
                bail!("{method} {path}: the server closed the connection");
            }
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut response = httparse::Response::new(&mut headers);
            let parsed = response
                .parse(&self.response)
                .with_context(|| format!("{method} {path}: a malformed response"))?;
            if let httparse::Status::Complete(header_len) = parsed {
                let length = response
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                    .and_then(|h| {
                        std::str::from_utf8(h.value)
                            .ok()?
                            .trim()
                            .parse::<usize>()
                            .ok()
                    })
                    .with_context(|| format!("{method} {path}: no Content-Length"))?;
                break (header_len, response.code.unwrap_or(0), length);
            }
            ensure!(
                self.response.len() < MAX_RESPONSE_BYTES,
                "{method} {path}: response headers too long"
            );
        };
        ensure!(
            body_len <= MAX_RESPONSE_BYTES,
            "{method} {path}: a response of {body_len} bytes"
        );
        let total = header_len + body_len;
        while self.response.len() < total {
            if self.stream.read_buf(&mut self.response).await? == 0 {
                bail!("{method} {path}: the server closed the connection mid-response");
            }
        }
        // One request at a time: anything past this response is a protocol error.
        ensure!(
            self.response.len() == total,
            "{method} {path}: bytes after the response"
        );
        let body = &self.response[header_len..total];
        if !(200..300).contains(&status) {
            bail!(
                "{method} {path}: status {status}: {}",
                String::from_utf8_lossy(body)
            );
        }
        Ok(body)
    }
}

/// A record as the client checks it: attribute names to their JSON text.
type RawRow<'a> = HashMap<Cow<'a, str>, &'a RawValue>;

/// The JSON text at a path of object fields (outermost first), everything else skipped
/// without building anything: a get answer holds the whole record; the client checks
/// only its key, in one pass over the body.
struct FieldPath<'n>(&'n [&'n str]);

impl<'de> serde::de::DeserializeSeed<'de> for FieldPath<'_> {
    type Value = Option<&'de RawValue>;

    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for FieldPath<'_> {
    type Value = Option<&'de RawValue>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let Some((first, rest)) = self.0.split_first() else {
            return Err(serde::de::Error::custom("an empty field path"));
        };
        let mut found = None;
        while let Some(name) = map.next_key::<Cow<'de, str>>()? {
            if name != *first {
                map.next_value::<serde::de::IgnoredAny>()?;
            } else if rest.is_empty() {
                found = Some(map.next_value::<&'de RawValue>()?);
            } else {
                found = map.next_value_seed(FieldPath(rest))?;
            }
        }
        Ok(found)
    }
}

/// The JSON text at `path` in the JSON object `text`.
fn field_text<'a>(text: &'a [u8], path: &[&str]) -> serde_json::Result<Option<&'a RawValue>> {
    use serde::de::DeserializeSeed;
    let mut deserializer = serde_json::Deserializer::from_slice(text);
    let found = FieldPath(path).deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(found)
}

#[derive(Deserialize)]
struct SearchAnswer<'a> {
    #[serde(borrow)]
    rows: Vec<RawRow<'a>>,
}

#[derive(Deserialize)]
struct PutAnswer {
    seq: u64,
}

/// One operation; `Err` is a wrong answer or a failed request.
async fn run_one(
    workload: &Workload,
    connection: &mut Connection,
    operation: Operation,
    record: &Value,
    rng: &mut StdRng,
) -> anyhow::Result<()> {
    let key_value = &record[&workload.key_column];
    let key = key_value.as_str().context("a key")?;
    let (authority, table) = (&workload.authority, &workload.table);
    match operation {
        Operation::Get => {
            let path = format!("/v1/tables/{table}/records/{}", percent_encode(key));
            let body = connection.call("GET", &path, authority, None).await?;
            let got = field_text(body, &["record", &workload.key_column])
                .context("the get answer is not an object holding a record object")?;
            ensure!(
                got.map(|raw| raw.get()) == Some(key_value.to_string().as_str()),
                "get {key}: got key {got:?}"
            );
        }
        Operation::Search => {
            let column = &workload.search_columns[rng.gen_range(0..workload.search_columns.len())];
            let value = &record[column];
            if value.is_null() {
                return Ok(());
            }
            let query = json!({"where": {"eq": {column: value}}, "limit": 10, "columns": [column]});
            let path = format!("/v1/tables/{table}/search");
            let query = query.to_string();
            let body = connection
                .call("POST", &path, authority, Some(query.as_bytes()))
                .await?;
            let answer: SearchAnswer =
                serde_json::from_slice(body).context("the search answer has no rows")?;
            ensure!(
                !answer.rows.is_empty(),
                "search {column} = {value}: no rows, but {key} has it"
            );
            let expected = value.to_string();
            for row in &answer.rows {
                let got = row.get(column.as_str()).map(|raw| raw.get());
                ensure!(
                    got == Some(expected.as_str()),
                    "search {column} = {value}: a row has {got:?}"
                );
            }
        }
        Operation::Put => {
            // Puts the record back as it is: traffic without changing the data.
            let path = format!("/v1/tables/{table}/records");
            let body = json!([record]).to_string();
            let answer = connection
                .call("POST", &path, authority, Some(body.as_bytes()))
                .await?;
            let answer: PutAnswer = serde_json::from_slice(answer)
                .with_context(|| format!("put {key}: the answer has no seq"))?;
            ensure!(answer.seq > 0, "put {key}: acknowledged as seq 0");
        }
    }
    Ok(())
}

/// One client: a connection that sends one request at a time until `deadline`,
/// reconnecting after a failed request.
async fn client(
    workload: &Workload,
    args: &HttpArgs,
    seed: u64,
    deadline: Instant,
) -> ClientReport {
    let mut rng = StdRng::seed_from_u64(seed);
    let cumulative: Vec<f64> = workload
        .zipf_weights
        .iter()
        .scan(0.0, |sum, w| {
            *sum += w;
            Some(*sum)
        })
        .collect();
    let mut report = ClientReport::default();
    let mut connection: Option<Connection> = None;
    while Instant::now() < deadline {
        let mut operation = pick_operation(&mut rng, args);
        if operation == Operation::Search && workload.search_columns.is_empty() {
            operation = Operation::Get;
        }
        let record = workload.pick_record(&mut rng, &cumulative);
        let started = Instant::now();
        let attempt = async {
            let mut open = match connection.take() {
                Some(open) => open,
                None => Connection::open(&workload.authority).await?,
            };
            run_one(workload, &mut open, operation, record, &mut rng).await?;
            // Kept only after a request that went well: after any failure the next
            // request starts on a fresh connection.
            connection = Some(open);
            anyhow::Ok(())
        };
        let outcome = match tokio::time::timeout(REQUEST_TIMEOUT, attempt).await {
            Ok(outcome) => outcome,
            Err(_) => Err(anyhow::anyhow!(
                "{operation:?}: no answer within {REQUEST_TIMEOUT:?}"
            )),
        };
        report.latencies[operation as usize].push(started.elapsed());
        if let Err(e) = outcome {
            if connection.is_none() {
                // Do not spin on a server that refuses connections.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            if report.errors.len() < 20 {
                report.errors.push(format!("{e:#}"));
            } else {
                report.errors.push(String::new());
            }
        }
    }
    report
}

/// Drives `args.clients` connections from one thread: an event loop spends the client's
/// CPU on requests rather than on switching between client threads, which on a small
/// machine would take cores from the server being measured.
fn drive_clients(
    workload: &Workload,
    args: &HttpArgs,
    seconds: u64,
    seed: u64,
) -> anyhow::Result<Vec<ClientReport>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the client event loop")?;
    let deadline = Instant::now() + Duration::from_secs(seconds);
    runtime.block_on(async {
        let clients = (0..args.clients).map(|i| client(workload, args, seed + i as u64, deadline));
        Ok(futures_util::future::join_all(clients).await)
    })
}

pub fn run(args: &HttpArgs) -> anyhow::Result<()> {
    ensure!(
        args.clients > 0 && args.seconds > 0,
        "clients and seconds must be positive"
    );
    ensure!(
        args.get_percent + args.search_percent <= 100,
        "the percents exceed 100"
    );
    let workload = Workload::prepare(args)?;
    let warmup = if args.warmup_seconds > 0 {
        // Other seeds than the measurement's, so it does not replay the same requests.
        drive_clients(&workload, args, args.warmup_seconds, args.seed ^ 0x5eed)?
    } else {
        Vec::new()
    };
    let started = Instant::now();
    let reports = drive_clients(&workload, args, args.seconds, args.seed)?;
    let elapsed = started.elapsed().as_secs_f64();
    let mut figures = serde_json::Map::new();
    figures.insert("experiment".into(), json!("http"));
    figures.insert("url".into(), json!(args.url));
    figures.insert("table".into(), json!(args.table));
    figures.insert("clients".into(), json!(args.clients));
    figures.insert("seconds".into(), json!(round(elapsed, 2)));
    figures.insert("warmup_seconds".into(), json!(args.warmup_seconds));
    println!(
        "{:<10} {:>12} {:>10} {:>10} {:>10}",
        "operation", "per second", "p50 us", "p99 us", "p999 us"
    );
    for (index, name) in ["get", "search", "put"].iter().enumerate() {
        let mut latencies: Vec<Duration> = reports
            .iter()
            .flat_map(|r| r.latencies[index].iter().copied())
            .collect();
        let rate = latencies.len() as f64 / elapsed;
        let (p50, p99, p999) = (
            quantile_us(&mut latencies, 0.5),
            quantile_us(&mut latencies, 0.99),
            quantile_us(&mut latencies, 0.999),
        );
        println!("{name:<10} {rate:>12.0} {p50:>10.0} {p99:>10.0} {p999:>10.0}");
        figures.insert(format!("{name}s_per_s"), json!(round(rate, 1)));
        figures.insert(format!("{name}_p50_us"), json!(round(p50, 1)));
        figures.insert(format!("{name}_p99_us"), json!(round(p99, 1)));
        figures.insert(format!("{name}_p999_us"), json!(round(p999, 1)));
    }
    let errors: Vec<&String> = warmup
        .iter()
        .chain(&reports)
        .flat_map(|r| &r.errors)
        .collect();
    println!("errors     {}", errors.len());
    for e in errors.iter().filter(|e| !e.is_empty()).take(5) {
        println!("  {e}");
    }
    figures.insert("errors".into(), json!(errors.len()));
    println!("{}", Value::Object(figures));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    /// A server that answers each request it reads with the next canned response,
    /// written in two pieces (headers and body may arrive in separate reads).
    async fn canned_server(responses: Vec<&'static [u8]>) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let authority = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buffer = vec![0u8; 4096];
            for response in responses {
                let mut request = Vec::new();
                // Requests here have no body: they end at the blank line.
                while !request.ends_with(b"\r\n\r\n") {
                    let n = socket.read(&mut buffer).await.unwrap();
                    if n == 0 {
                        return;
                    }
                    request.extend_from_slice(&buffer[..n]);
                }
                let (head, tail) = response.split_at(response.len() / 2);
                socket.write_all(head).await.unwrap();
                socket.flush().await.unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
                socket.write_all(tail).await.unwrap();
            }
        });
        authority
    }

    #[test]
    fn one_field_is_read_as_a_full_parse_reads_it() {
        let objects = [
            json!({"id": "k1", "a": [1, {"id": "inner"}], "b": null}),
            json!({"a\"b": 1.5, "id": {"nested": [true, false]}, "z": "x\u{e9}\n"}),
            json!({"other": 3}),
            json!({}),
        ];
        for object in &objects {
            let text = serde_json::to_string(object).unwrap();
            for name in ["id", "a\"b", "z", "missing"] {
                let got = field_text(text.as_bytes(), &[name])
                    .unwrap()
                    .map(|r| r.get().to_string());
                let want = object.get(name).map(|v| v.to_string());
                assert_eq!(got, want, "{name} in {text}");
            }
            // One level down, as a get answer is read.
            let answer = serde_json::to_string(&json!({"snapshot": 1, "record": object})).unwrap();
            for name in ["id", "missing"] {
                let got = field_text(answer.as_bytes(), &["record", name])
                    .unwrap()
                    .map(|r| r.get().to_string());
                let want = object.get(name).map(|v| v.to_string());
                assert_eq!(got, want, "record.{name} in {answer}");
            }
        }
        for bad in [
            "[1, 2]",
            "{\"record\": [1]}",
            "{\"id\": 1} trailing",
            "{\"id\": ",
        ] {
            assert!(
                field_text(bad.as_bytes(), &["record", "id"]).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_client_reads_whole_responses_and_refuses_bad_ones() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let authority = canned_server(vec![
                b"HTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\n{\"seq\": 42}",
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Other: y\r\n\r\n[]",
                b"HTTP/1.1 404 Not Found\r\ncontent-length: 9\r\n\r\nnot found",
            ])
            .await;
            let mut connection = Connection::open(&authority).await.unwrap();
            let body = connection.call("GET", "/a", "h", None).await.unwrap();
            assert_eq!(body, b"{\"seq\": 42}");
            let body = connection.call("GET", "/b", "h", None).await.unwrap();
            assert_eq!(body, b"[]");
            let error = connection.call("GET", "/c", "h", None).await.unwrap_err();
            assert!(
                format!("{error:#}").contains("status 404: not found"),
                "{error:#}"
            );
            // The server has no more answers and closes the connection.
            let error = connection.call("GET", "/d", "h", None).await.unwrap_err();
            assert!(format!("{error:#}").contains("closed"), "{error:#}");

            let authority = canned_server(vec![
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\n[]\r\n0\r\n\r\n",
            ])
            .await;
            let mut connection = Connection::open(&authority).await.unwrap();
            let error = connection.call("GET", "/e", "h", None).await.unwrap_err();
            assert!(
                format!("{error:#}").contains("no Content-Length"),
                "{error:#}"
            );

            let authority =
                canned_server(vec![b"HTTP/1.1 200 OK\r\ncontent-length: 50\r\n\r\nshort"]).await;
            let mut connection = Connection::open(&authority).await.unwrap();
            let error = connection.call("GET", "/f", "h", None).await.unwrap_err();
            assert!(format!("{error:#}").contains("mid-response"), "{error:#}");
        });
    }
}
