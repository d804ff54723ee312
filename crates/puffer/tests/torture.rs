//! The crash campaign on the real server: `puffer serve` killed with SIGKILL at random
//! moments under mixed HTTP traffic (multi-table batches of puts and deletes, SQL
//! inserts and deletes, tables made and dropped, and readers getting, searching and
//! counting), with small log tables so that sealing and compaction run all the time.
//! After each restart the server must come up, and every table must equal a model of the
//! acknowledged history: every acknowledged change there whole, the one unanswered
//! change there whole or not at all, deleted records gone. A reader answered with a
//! server error (a corrupt file, a bug) fails the campaign.
//!
//! `PUFFER_TORTURE_KILLS=1000 cargo test --release -p puffer --test torture -- --nocapture`
//! runs the long campaign; CI runs 50 kills.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{ServeProcess, XorShift as Rng};
use serde_json::{json, Value};

/// Every table's records, key to value.
type State = BTreeMap<String, BTreeMap<String, i64>>;

/// The tables every history starts with, and the most it makes besides.
const BASE_TABLES: [&str; 2] = ["t1", "t2"];
const MAX_EXTRA_TABLES: usize = 3;

/// The server's answer: status and JSON body, or `None` when none came (killed).
fn send(method: &str, url: &str, body: Option<&Value>) -> Option<(u16, Value)> {
    let request = ureq::request(method, url).timeout(Duration::from_secs(20));
    let result = match body {
        Some(body) => request.send_json(body),
        None => request.call(),
    };
    let response = match result {
        Ok(response) | Err(ureq::Error::Status(_, response)) => response,
        Err(_) => return None,
    };
    let status = response.status();
    let body = response.into_json().unwrap_or(Value::Null);
    Some((status, body))
}

fn table_schema(name: &str) -> Value {
    json!({"name": name, "key": "id", "shards": 3,
        "attributes": [{"name": "v", "type": "int"}, {"name": "tag", "type": "string"}]})
}

/// One change and the state it leads to, if applied.
fn next_change(rng: &mut Rng, state: &State, counter: &mut i64) -> (String, String, Value, State) {
    let mut after = state.clone();
    let tables: Vec<&String> = state.keys().collect();
    let extra: Vec<&String> = tables
        .iter()
        .copied()
        .filter(|t| !BASE_TABLES.contains(&t.as_str()))
        .collect();
    *counter += 1;
    let n = *counter;
    match rng.below(20) {
        0 if extra.len() < MAX_EXTRA_TABLES => {
            let name = format!("x{n}");
            after.insert(name.clone(), BTreeMap::new());
            (
                "POST".into(),
                "/v1/tables".into(),
                table_schema(&name),
                after,
            )
        }
        1 if !extra.is_empty() => {
            let name = extra[rng.below(extra.len() as u64) as usize].clone();
            after.remove(&name);
            (
                "DELETE".into(),
                format!("/v1/tables/{name}"),
                Value::Null,
                after,
            )
        }
        2 | 3 => {
            let table = tables[rng.below(tables.len() as u64) as usize].clone();
            let key = format!("k{}", rng.below(300));
            let sql = if rng.below(2) == 0 {
                after.get_mut(&table).unwrap().remove(&key);
                format!("DELETE FROM {table} WHERE id = '{key}'")
            } else {
                let key = format!("s{n}");
                after.get_mut(&table).unwrap().insert(key.clone(), n);
                format!("INSERT INTO {table} (id, v, tag) VALUES ('{key}', {n}, 'sql')")
            };
            (
                "POST".into(),
                "/v1/sql".into(),
                json!({ "query": sql }),
                after,
            )
        }
        _ => {
            // A batch over several tables: all of it or none.
            let mut operations = Vec::new();
            for _ in 0..1 + rng.below(12) {
                let table = tables[rng.below(tables.len() as u64) as usize].clone();
                let key = format!("k{}", rng.below(300));
                let rows = after.get_mut(&table).unwrap();
                if rng.below(5) == 0 {
                    rows.remove(&key);
                    operations.push(json!({"table": table, "delete": key}));
                } else {
                    rows.insert(key.clone(), n);
                    let tag = "t".repeat(rng.below(40) as usize);
                    operations
                        .push(json!({"table": table, "put": {"id": key, "v": n, "tag": tag}}));
                }
            }
            let body = json!({ "operations": operations });
            ("POST".into(), "/v1/batches".into(), body, after)
        }
    }
}

/// What the server holds now: every table, every record.
fn observed(base: &str) -> State {
    let (status, tables) = send("GET", &format!("{base}/v1/tables"), None).expect("list");
    assert_eq!(status, 200, "{tables}");
    let mut state = State::new();
    for table in tables["tables"].as_array().unwrap() {
        let name = table["name"].as_str().unwrap().to_string();
        let url = format!("{base}/v1/tables/{name}/search");
        let (status, answer) = send("POST", &url, Some(&json!({"where": {"all": true}})))
            .unwrap_or_else(|| panic!("no answer scanning {name}"));
        assert_eq!(status, 200, "scanning {name}: {answer}");
        assert_eq!(answer["truncated"], json!(false), "{name}");
        let rows = answer["rows"].as_array().unwrap();
        let records = rows
            .iter()
            .map(|r| {
                (
                    r["id"].as_str().unwrap().to_string(),
                    r["v"].as_i64().unwrap(),
                )
            })
            .collect();
        state.insert(name, records);
    }
    state
}

/// Readers: gets, searches and counts while the writer writes; any server error (500)
/// is counted (a 503 or 429 is a refusal, and no answer is the kill).
fn spawn_readers(
    base: &str,
    stop: &Arc<AtomicBool>,
    errors: &Arc<AtomicU64>,
    seed: u64,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..2)
        .map(|reader| {
            let (base, stop, errors) = (base.to_string(), stop.clone(), errors.clone());
            std::thread::spawn(move || {
                let mut rng = Rng(seed * 2 + reader + 1);
                while !stop.load(Ordering::Relaxed) {
                    let table = BASE_TABLES[rng.below(2) as usize];
                    let key = format!("k{}", rng.below(300));
                    let answer = match rng.below(3) {
                        0 => send("GET", &format!("{base}/v1/tables/{table}/records/{key}"), None),
                        1 => send(
                            "POST",
                            &format!("{base}/v1/tables/{table}/search"),
                            Some(&json!({"where": {"contains": {"tag": "ttt"}}, "limit": 20})),
                        ),
                        _ => send(
                            "POST",
                            &format!("{base}/v1/sql"),
                            Some(&json!({"query": format!("SELECT COUNT(*) FROM {table} WHERE v > 10")})),
                        ),
                    };
                    match answer {
                        Some((status, body)) if status >= 500 && status != 503 => {
                            eprintln!("reader: {status} {body}");
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                        Some(_) => {}
                        None => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            })
        })
        .collect()
}

#[test]
fn sigkills_under_mixed_traffic_lose_nothing_acknowledged() {
    let kills = common::count_from_env("PUFFER_TORTURE_KILLS", 50);
    let dir = tempfile::tempdir().unwrap();
    // Small log tables: seals and compactions all along.
    let env = [("PUFFER_LOG_TABLE_MAX_RECORDS", "64")];
    let start = || ServeProcess::start_on(dir.path(), &[], &env);
    let mut server = start();
    for table in BASE_TABLES {
        let url = format!("{}/v1/tables", server.base);
        let (status, answer) = send("POST", &url, Some(&table_schema(table))).unwrap();
        assert_eq!(status, 201, "{answer}");
    }
    let mut state: State = BASE_TABLES
        .iter()
        .map(|t| (t.to_string(), BTreeMap::new()))
        .collect();
    let mut rng = Rng(0x7047_7572_6521);
    let mut counter = 0i64;
    let (mut acknowledged, mut unanswered, mut in_flight_applied) = (0u64, 0u64, 0u64);
    let mut layer_changes = 0u64;
    let reader_errors = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    for kill in 0..kills {
        let stop = Arc::new(AtomicBool::new(false));
        let readers = spawn_readers(&server.base, &stop, &reader_errors, kill);
        // The writer runs until its request goes unanswered: the kill comes at a random
        // moment, from another thread, mostly while a change is being applied.
        let delay = Duration::from_millis(20 + rng.below(400));
        let mut in_flight: Option<State> = None;
        std::thread::scope(|scope| {
            let server = &server;
            scope.spawn(move || {
                std::thread::sleep(delay);
                server.kill();
            });
            while in_flight.is_none() {
                if rng.below(25) == 0 {
                    // A layer built or dropped by hand meanwhile (changes no answer).
                    let action = ["add", "drop", "auto"][rng.below(3) as usize];
                    let id = rng.below(12);
                    let url = format!("{}/v1/admin/replicas/{id}/layers", server.base);
                    if let Some((status, answer)) =
                        send("POST", &url, Some(&json!({ "action": action })))
                    {
                        assert!(status < 500 || status == 503, "{url}: {status} {answer}");
                        layer_changes += u64::from(status == 200);
                    }
                }
                let (method, path, body, after) = next_change(&mut rng, &state, &mut counter);
                let body = (!body.is_null()).then_some(&body);
                match send(&method, &format!("{}{path}", server.base), body) {
                    Some((status, _)) if (200..300).contains(&status) => {
                        acknowledged += 1;
                        state = after;
                    }
                    Some((429 | 503, _)) | None => {
                        // Refused for now, or unanswered: applied whole or not at all.
                        in_flight = Some(after);
                    }
                    Some((status, answer)) => {
                        panic!("{method} {path}: {status} {answer} (body {body:?})")
                    }
                }
            }
        });
        server.kill();
        stop.store(true, Ordering::Relaxed);
        for reader in readers {
            reader.join().unwrap();
        }
        drop(server);
        unanswered += 1;
        server = start();
        let now = observed(&server.base);
        if now != state {
            let in_flight = in_flight.expect("a change was in flight");
            assert_eq!(
                now, in_flight,
                "kill {kill}: after restart the tables are neither the acknowledged \
                 history nor it with the unanswered change"
            );
            state = in_flight;
            in_flight_applied += 1;
        }
    }
    let errors = reader_errors.load(Ordering::Relaxed);
    eprintln!(
        "{kills} kills in {:.1} s: {acknowledged} changes acknowledged, all there after \
         every restart; {unanswered} unanswered ({in_flight_applied} of them applied \
         whole, the rest not at all); {} records in {} tables at the end; {errors} \
         reader server errors; {layer_changes} layers added or dropped by hand",
        started.elapsed().as_secs_f64(),
        state.values().map(BTreeMap::len).sum::<usize>(),
        state.len()
    );
    assert_eq!(errors, 0, "readers got server errors");
    // Compaction ran along: the tables hold segments, read whole at every restart.
    let segments = count_files(dir.path(), ".meta");
    eprintln!("{segments} segments on disk at the end");
    assert!(
        segments > 0,
        "no segment was ever made: compaction did not run"
    );
    assert!(
        acknowledged > kills,
        "too few changes were acknowledged to mean much"
    );
}

/// Files under `dir` whose names end with `suffix`.
fn count_files(dir: &std::path::Path, suffix: &str) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| {
            let path = entry.path();
            if path.is_dir() {
                count_files(&path, suffix)
            } else {
                usize::from(path.to_string_lossy().ends_with(suffix))
            }
        })
        .sum()
}
