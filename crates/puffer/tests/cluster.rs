//! A cluster of `puffer serve` processes on loopback, on an etcd the test starts:
//! writes through the ingest leader, or handed to it by another node, reach every
//! node (checked against a model);
//! the leader killed with SIGKILL, the other node takes over within the lease TTL
//! plus catch-up, every acknowledged write is there and none partly, and writes go on.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::ServeProcess;
use puffer_cluster::etcd::LocalEtcd;
use serde_json::{json, Value};

const TTL_S: &str = "2";

fn free_port() -> u16 {
    puffer_cluster::etcd::local::free_port().unwrap()
}

fn get(url: &str) -> Result<Value, String> {
    ureq::get(url)
        .timeout(Duration::from_secs(5))
        .call()
        .map_err(|e| e.to_string())?
        .into_json()
        .map_err(|e| e.to_string())
}

fn post(url: &str, body: &Value) -> Result<Value, String> {
    match ureq::post(url)
        .timeout(Duration::from_secs(10))
        .send_json(body)
    {
        Ok(answer) => answer.into_json().map_err(|e| e.to_string()),
        Err(ureq::Error::Status(code, answer)) => Err(format!(
            "{code}: {}",
            answer.into_string().unwrap_or_default()
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// Waits until `done` gives a value, at most `limit`.
fn wait_for<T>(limit: Duration, mut done: impl FnMut() -> Option<T>) -> Option<(T, Duration)> {
    let started = Instant::now();
    while started.elapsed() < limit {
        if let Some(value) = done() {
            return Some((value, started.elapsed()));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

fn count(base: &str) -> Option<u64> {
    let answer = post(
        &format!("{base}/v1/sql"),
        &json!({"query": "SELECT COUNT(*) FROM rooms"}),
    )
    .ok()?;
    answer["count"].as_u64()
}

/// Every key of the model, read from `base`, as the model has it.
fn agrees(base: &str, model: &BTreeMap<String, String>) {
    for (key, city) in model {
        let record = get(&format!("{base}/v1/tables/rooms/records/{key}")).unwrap();
        assert_eq!(
            record["record"]["city"],
            json!(city),
            "{base} {key}: {record}"
        );
    }
}

/// Whether etcd is there; says loudly why the test skips if not.
/// Gauge `name` from a node's `/metrics`.
fn gauge(base: &str, name: &str) -> u64 {
    let text = ureq::get(&format!("{base}/metrics"))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in {text}"))
        .parse()
        .unwrap()
}

fn have_etcd(test: &str) -> bool {
    if LocalEtcd::binary().is_some() {
        return true;
    }
    assert!(
        std::env::var_os("PUFFER_REQUIRE_SERVICES").is_none(),
        "{test}: no etcd binary, and PUFFER_REQUIRE_SERVICES is set"
    );
    eprintln!("\n*** SKIPPED {test}: no etcd binary ***\n");
    false
}

/// Starts node `name` of the cluster on `etcd` with deep storage in `dir/deep`, with
/// every role.
fn start_node(dir: &std::path::Path, etcd: &LocalEtcd, name: &str) -> ServeProcess {
    start_node_as(dir, etcd, name, "coordinator,ingest,indexer,data,broker")
}

/// [`start_node`] with `roles`.
fn start_node_as(dir: &std::path::Path, etcd: &LocalEtcd, name: &str, roles: &str) -> ServeProcess {
    start_node_with(dir, etcd, name, roles, &[], &[])
}

/// [`start_node_as`] with more arguments and environment variables.
fn start_node_with(
    dir: &std::path::Path,
    etcd: &LocalEtcd,
    name: &str,
    roles: &str,
    more: &[&str],
    env: &[(&str, &str)],
) -> ServeProcess {
    let deep = dir.join("deep");
    let (endpoint, rpc) = (etcd.endpoint(), format!("127.0.0.1:{}", free_port()));
    let mut args = vec![
        "--etcd",
        &endpoint,
        "--deep-storage",
        deep.to_str().unwrap(),
        "--node-id",
        name,
        "--rpc-listen",
        &rpc,
        "--lease-ttl-s",
        TTL_S,
        "--roles",
        roles,
    ];
    args.extend_from_slice(more);
    ServeProcess::start_listening(
        &dir.join(name),
        &format!("127.0.0.1:{}", free_port()),
        &args,
        env,
    )
}

fn leads_ingest(node: &ServeProcess) -> Option<Value> {
    get(&format!("{}/v1/admin/cluster", node.base))
        .ok()
        .filter(|s| s["leads_ingest"] == json!(true))
}

#[test]
fn etcd_away_stops_writes_not_reads_and_writes_come_back() {
    if !have_etcd("etcd_away_stops_writes_not_reads_and_writes_come_back") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut etcd = LocalEtcd::start(&dir.path().join("etcd")).unwrap();
    let a = start_node(dir.path(), &etcd, "a");
    wait_for(Duration::from_secs(15), || leads_ingest(&a)).expect("a leads ingest");
    let b = start_node(dir.path(), &etcd, "b");
    let table =
        json!({"name": "rooms", "key": "id", "attributes": [{"name": "city", "type": "string"}]});
    post(&format!("{}/v1/tables", a.base), &table).unwrap();
    let mut model = BTreeMap::new();
    for i in 0..30 {
        let (key, city) = (format!("k{i}"), ["Lisbon", "Porto"][i % 2]);
        post(
            &format!("{}/v1/tables/rooms/records", a.base),
            &json!([{"id": key, "city": city}]),
        )
        .unwrap();
        model.insert(key, city.to_string());
    }
    wait_for(Duration::from_secs(10), || {
        (count(&b.base) == Some(30)).then_some(())
    })
    .expect("b caught up");

    etcd.kill();
    // Reads go on from each node's own copy.
    agrees(&a.base, &model);
    agrees(&b.base, &model);
    // A write is refused, retryably, and changes nothing.
    let refused = post(
        &format!("{}/v1/tables/rooms/records", a.base),
        &json!([{"id": "lost", "city": "Faro"}]),
    )
    .unwrap_err();
    assert!(refused.starts_with("503"), "{refused}");
    agrees(&a.base, &model);

    etcd.restart().unwrap();
    // Writes come back once the leader has checked the log.
    let (_, took) = wait_for(Duration::from_secs(60), || {
        post(
            &format!("{}/v1/tables/rooms/records", a.base),
            &json!([{"id": "back", "city": "Braga"}]),
        )
        .ok()
    })
    .unwrap_or_else(|| {
        let last = post(
            &format!("{}/v1/tables/rooms/records", a.base),
            &json!([{"id": "back", "city": "Braga"}]),
        );
        let status = get(&format!("{}/v1/admin/cluster", a.base));
        panic!("writes did not come back after etcd did: {last:?}; a says {status:?}")
    });
    eprintln!("writes came back {took:?} after etcd restarted");
    model.insert("back".into(), "Braga".into());
    wait_for(Duration::from_secs(10), || {
        (count(&b.base) == Some(31)).then_some(())
    })
    .expect("b followed");
    agrees(&a.base, &model);
    agrees(&b.base, &model);
    // The refused write is nowhere.
    let lost = get(&format!("{}/v1/tables/rooms/records/lost", b.base));
    assert!(lost.map(|r| r["record"].is_null()).unwrap_or(true));
}

#[test]
fn a_cluster_survives_its_ingest_leader_killed() {
    if !have_etcd("a_cluster_survives_its_ingest_leader_killed") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let etcd = LocalEtcd::start(&dir.path().join("etcd")).unwrap();
    let start = |name: &str| start_node(dir.path(), &etcd, name);
    let a = start("a");
    // a is the first ingest candidate: it leads once it says so.
    wait_for(Duration::from_secs(15), || {
        get(&format!("{}/v1/admin/cluster", a.base))
            .ok()
            .filter(|s| s["leads_ingest"] == json!(true))
    })
    .expect("a became the ingest leader");
    let b = start("b");

    let table =
        json!({"name": "rooms", "key": "id", "attributes": [{"name": "city", "type": "string"}]});
    post(&format!("{}/v1/tables", a.base), &table).unwrap();
    wait_for(Duration::from_secs(10), || {
        get(&format!("{}/v1/tables/rooms", b.base)).ok()
    })
    .expect("b made the table from the catalog");
    let mut model = BTreeMap::new();
    for batch in 0..20 {
        // Every other batch goes to b, which hands it to the leader.
        let node = if batch % 2 == 0 { &a } else { &b };
        let items: Vec<Value> = (0..10)
            .map(|i| {
                let key = format!("k{}", (batch * 7 + i * 13) % 150);
                let city = ["Lisbon", "Porto", "Faro"][(batch + i) % 3];
                model.insert(key.clone(), city.to_string());
                json!({"id": key, "city": city})
            })
            .collect();
        post(
            &format!("{}/v1/tables/rooms/records", node.base),
            &json!(items),
        )
        .unwrap();
    }
    let expected = model.len() as u64;
    assert_eq!(count(&a.base), Some(expected), "the leader has every write");
    wait_for(Duration::from_secs(10), || {
        (count(&b.base) == Some(expected)).then_some(())
    })
    .expect("b caught up");
    agrees(&b.base, &model);
    // /metrics says where each node is in the order.
    let published = get(&format!("{}/v1/admin/cluster", a.base)).unwrap()["published"]
        .as_u64()
        .unwrap();
    assert_eq!(gauge(&a.base, "puffer_published_scu"), published);
    assert_eq!(gauge(&b.base, "puffer_published_scu"), published);
    assert_eq!(gauge(&a.base, "puffer_following"), 0);
    assert_eq!(gauge(&b.base, "puffer_following"), 1);

    // a leads the coordinators too (it stood first).
    let before = get(&format!("{}/v1/admin/cluster", b.base)).unwrap();
    assert_eq!(before["coordinator_leader"], json!("a"), "{before}");

    // The leader dies mid-stream: writes keep coming at it until it is gone.
    let kill_at = Instant::now();
    a.kill();
    let (_, took) = wait_for(Duration::from_secs(20), || {
        get(&format!("{}/v1/admin/cluster", b.base))
            .ok()
            .filter(|s| s["leads_ingest"] == json!(true))
    })
    .expect("b took over as ingest leader");
    eprintln!(
        "ingest failover: b leads {:?} after a's SIGKILL (lease TTL {TTL_S} s)",
        kill_at.elapsed().max(took)
    );
    wait_for(Duration::from_secs(20), || {
        get(&format!("{}/v1/admin/cluster", b.base))
            .ok()
            .filter(|s| s["coordinator_leader"] == json!("b"))
    })
    .expect("b took over as coordinator leader");
    eprintln!(
        "coordinator failover: b leads {:?} after a's SIGKILL (lease TTL {TTL_S} s)",
        kill_at.elapsed()
    );
    // Every acknowledged write is on b, none partly.
    assert_eq!(count(&b.base), Some(expected));
    agrees(&b.base, &model);
    // Writes go on through the new leader.
    post(
        &format!("{}/v1/tables/rooms/records", b.base),
        &json!([{"id": "new", "city": "Braga"}]),
    )
    .unwrap();
    model.insert("new".into(), "Braga".into());
    agrees(&b.base, &model);
    let status = get(&format!("{}/v1/admin/cluster", b.base)).unwrap();
    assert_eq!(status["ingest_leader"], json!("b"), "{status}");
    let members: Vec<String> = status["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["node_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(members, ["b"], "a's lease expired, so it left: {status}");
}

/// The keys of `table` on `base` that match `condition`, sorted.
fn search_keys(base: &str, table: &str, condition: Value) -> Result<Vec<String>, String> {
    let answer = post(
        &format!("{base}/v1/tables/{table}/search"),
        &json!({"where": condition, "columns": ["id"], "limit": 100000}),
    )?;
    let mut keys: Vec<String> = answer["rows"]
        .as_array()
        .ok_or_else(|| format!("no rows in {answer}"))?
        .iter()
        .map(|row| row["id"].as_str().unwrap_or_default().to_string())
        .collect();
    keys.sort();
    Ok(keys)
}

/// Searches `base` for rooms in `city`: their keys, sorted.
fn keys_in(base: &str, city: &str) -> Result<Vec<String>, String> {
    search_keys(base, "rooms", json!({"eq": {"city": city}}))
}

#[test]
fn a_broker_answers_from_the_data_nodes_through_one_killed() {
    let test = "a_broker_answers_from_the_data_nodes_through_one_killed";
    if !have_etcd(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut etcd = LocalEtcd::start(&dir.path().join("etcd")).unwrap();
    let a = start_node_as(dir.path(), &etcd, "a", "coordinator,ingest,data");
    wait_for(Duration::from_secs(15), || leads_ingest(&a)).expect("a leads ingest");
    // b and c hold only the shards placed on them, and let the others go after 1 s.
    let grace = ["--release-grace-s", "1"];
    let b = start_node_with(dir.path(), &etcd, "b", "data", &grace, &[]);
    let c = start_node_with(dir.path(), &etcd, "c", "data", &grace, &[]);
    let broker = start_node_as(dir.path(), &etcd, "broker", "broker");

    // Everything through the broker, which holds no data: the table change and the
    // writes are handed to the leader, the reads fanned out to a and b.
    let table = json!({"name": "rooms", "key": "id", "shards": 4,
        "attributes": [{"name": "city", "type": "string"}]});
    post(&format!("{}/v1/tables", broker.base), &table).unwrap();
    // A table made through one node is usable through another at once.
    let extra = json!({"name": "extra", "key": "id",
        "attributes": [{"name": "city", "type": "string"}]});
    post(&format!("{}/v1/tables", a.base), &extra).unwrap();
    post(
        &format!("{}/v1/tables/extra/records", b.base),
        &json!([{"id": "x", "city": "Evora"}]),
    )
    .unwrap();
    let x = get(&format!("{}/v1/tables/extra/records/x", broker.base)).unwrap();
    assert_eq!(x["record"]["city"], json!("Evora"), "{x}");
    let mut model = BTreeMap::new();
    for batch in 0..10 {
        let items: Vec<Value> = (0..20)
            .map(|i| {
                let key = format!("k{}", (batch * 11 + i * 17) % 160);
                let city = ["Lisbon", "Porto", "Faro"][(batch + i) % 3];
                model.insert(key.clone(), city.to_string());
                json!({"id": key, "city": city})
            })
            .collect();
        post(
            &format!("{}/v1/tables/rooms/records", broker.base),
            &json!(items),
        )
        .unwrap();
    }
    // Read your writes: the broker waits for data nodes holding its last write.
    assert_eq!(count(&broker.base), Some(model.len() as u64));
    agrees(&broker.base, &model);
    let in_city = |model: &BTreeMap<String, String>, city: &str| -> Vec<String> {
        model
            .iter()
            .filter(|(_, c)| c.as_str() == city)
            .map(|(k, _)| k.clone())
            .collect()
    };
    assert_eq!(
        keys_in(&broker.base, "Porto").unwrap(),
        in_city(&model, "Porto")
    );
    // SQL too.
    let answer = post(
        &format!("{}/v1/sql", broker.base),
        &json!({"query": "SELECT COUNT(*) FROM rooms WHERE city = 'Lisbon'"}),
    )
    .unwrap();
    assert_eq!(
        answer["count"],
        json!(in_city(&model, "Lisbon").len()),
        "{answer}"
    );
    // Analytics SQL too: a grouped count and a self-join, fanned out at one snapshot
    // every data node holds.
    assert_eq!(grouped_counts(&broker.base).unwrap(), per_city(&model));
    let joined = post(
        &format!("{}/v1/sql", broker.base),
        &json!({"query": "SELECT COUNT(*) AS n FROM rooms r JOIN rooms s ON r.city = s.city WHERE r.city = 'Faro'"}),
    )
    .unwrap();
    let faro = in_city(&model, "Faro").len();
    assert_eq!(joined["rows"][0]["n"], json!(faro * faro), "{joined}");
    let status = get(&format!("{}/v1/admin/cluster", broker.base)).unwrap();
    assert_eq!(
        status["published"],
        json!(0),
        "the broker holds no data: {status}"
    );
    // The command line talks to the broker as to one node.
    let puffer = |args: &[&str]| -> String {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_puffer"))
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "puffer {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let shown = puffer(&["status", "--url", &broker.base]);
    for line in [
        "ingest leader a",
        "reads: data nodes, through this broker",
        "-> b at",
        "placement",
    ] {
        assert!(shown.contains(line), "{line:?} not in:\n{shown}");
    }
    let counted = puffer(&[
        "sql",
        "--url",
        &broker.base,
        "-e",
        "SELECT COUNT(*) FROM rooms WHERE city = 'Faro'",
    ]);
    // A count prints as one line of JSON.
    let counted: Value = serde_json::from_str(counted.trim()).unwrap();
    assert_eq!(
        counted["count"],
        json!(in_city(&model, "Faro").len()),
        "{counted}"
    );

    // The coordinator (a) placed each of the 5 shards on 2 of the 3 data nodes.
    let placed = |node: &ServeProcess| -> Option<BTreeMap<String, u64>> {
        let status = get(&format!("{}/v1/admin/cluster", node.base)).ok()?;
        serde_json::from_value(status["placement"]["shards_per_node"].clone()).ok()
    };
    let (before, _) = wait_for(Duration::from_secs(10), || {
        placed(&broker).filter(|p| p.len() == 3 && p.values().sum::<u64>() == 10)
    })
    .unwrap_or_else(|| panic!("placement: {:?}", placed(&broker)));
    assert!(before.values().all(|&n| (3..=4).contains(&n)), "{before:?}");

    // b and c come to hold exactly as many shards as placed on them; a holds all.
    let held = |node: &ServeProcess| -> Option<u64> {
        let status = get(&format!("{}/v1/admin/cluster", node.base)).ok()?;
        let held: BTreeMap<String, Vec<u32>> =
            serde_json::from_value(status["holding"]["held"].clone()).ok()?;
        Some(held.values().map(|shards| shards.len() as u64).sum())
    };
    for (name, node) in [("b", &b), ("c", &c)] {
        let placed_here = before[name];
        wait_for(Duration::from_secs(15), || {
            (held(node) == Some(placed_here)).then_some(())
        })
        .unwrap_or_else(|| panic!("{name} holds {:?} shards, {placed_here} placed", held(node)));
    }
    assert_eq!(gauge(&c.base, "puffer_shards_held"), before["c"]);
    assert_eq!(gauge(&c.base, "puffer_shards_not_held"), 5 - before["c"]);
    let shown = puffer(&["status", "--url", &c.base]);
    assert!(
        shown.contains("holds the shards placed here: ") && shown.contains("rooms ["),
        "{shown}"
    );
    // A data node holding only some shards reads the others through its broker.
    assert_eq!(count(&c.base), Some(model.len() as u64));
    agrees(&c.base, &model);
    assert_eq!(grouped_counts(&c.base).unwrap(), per_city(&model));

    // b dies: every read through the broker is still answered, and right.
    b.kill();
    let killed_at = Instant::now();
    let mut reads = 0;
    while killed_at.elapsed() < Duration::from_secs(3) {
        assert_eq!(
            keys_in(&broker.base, "Faro").expect("a search after b's SIGKILL"),
            in_city(&model, "Faro")
        );
        let key = format!("k{}", reads % 160);
        let url = format!("{}/v1/tables/rooms/records/{key}", broker.base);
        match model.get(&key) {
            Some(city) => {
                let record = get(&url).expect("a get after b's SIGKILL");
                assert_eq!(record["record"]["city"], json!(city), "{key}");
            }
            None => {
                let missing = get(&url).unwrap_err();
                assert!(missing.contains("404"), "{key}: {missing}");
            }
        }
        if reads % 10 == 0 {
            assert_eq!(
                grouped_counts(&broker.base).expect("a grouped count after b's SIGKILL"),
                per_city(&model)
            );
        }
        reads += 1;
    }
    eprintln!(
        "{reads} searches and gets (a tenth with a grouped count) through the broker after b's SIGKILL, none failed"
    );
    // Once b's lease expires, its replicas are placed on a and c: every shard on both.
    let (after, _) = wait_for(Duration::from_secs(15), || {
        placed(&broker).filter(|p| !p.contains_key("b") && p.values().sum::<u64>() == 10)
    })
    .unwrap_or_else(|| panic!("b's shards were not placed again: {:?}", placed(&broker)));
    let replaced_after = killed_at.elapsed();
    assert_eq!(after, BTreeMap::from([("a".into(), 5), ("c".into(), 5)]));
    eprintln!("b's shards placed again {replaced_after:?} after its SIGKILL (lease TTL {TTL_S} s)");
    // c takes b's shards on: every shard has its 2 replicas again.
    wait_for(Duration::from_secs(20), || {
        (held(&c) == Some(5)).then_some(())
    })
    .unwrap_or_else(|| panic!("c holds {:?} shards, 5 placed on it", held(&c)));
    eprintln!(
        "every shard held twice again {:?} after b's SIGKILL",
        killed_at.elapsed()
    );
    agrees(&c.base, &model);
    // Writes go on through it too.
    post(
        &format!("{}/v1/tables/rooms/records", broker.base),
        &json!([{"id": "new", "city": "Braga"}]),
    )
    .unwrap();
    model.insert("new".into(), "Braga".into());
    agrees(&broker.base, &model);
    assert_eq!(count(&broker.base), Some(model.len() as u64));

    // etcd gone too: the broker answers from its cached routing and catalog entries
    // (past their time to live), and refuses writes retryably.
    etcd.kill();
    std::thread::sleep(Duration::from_millis(1500));
    agrees(&broker.base, &model);
    assert_eq!(
        keys_in(&broker.base, "Porto").unwrap(),
        in_city(&model, "Porto")
    );
    let refused = post(
        &format!("{}/v1/tables/rooms/records", broker.base),
        &json!([{"id": "lost", "city": "Faro"}]),
    )
    .unwrap_err();
    assert!(refused.starts_with("503"), "{refused}");
}

/// Subspaces on a cluster of processes: added through a broker (built by the ingest
/// leader), shown by `DESCRIBE` on every node, searched through the broker and through
/// a data node holding only its placed shards, as a model of the acknowledged records
/// says, while writes through the broker move records between regions; then dropped.
#[test]
fn subspaces_through_a_broker_answer_as_the_model() {
    let test = "subspaces_through_a_broker_answer_as_the_model";
    if !have_etcd(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let etcd = LocalEtcd::start(&dir.path().join("etcd")).unwrap();
    let a = start_node_as(dir.path(), &etcd, "a", "coordinator,ingest,data");
    wait_for(Duration::from_secs(15), || leads_ingest(&a)).expect("a leads ingest");
    let b = start_node_as(dir.path(), &etcd, "b", "data");
    let broker = start_node_as(dir.path(), &etcd, "broker", "broker");
    let table = json!({"name": "rooms", "key": "id", "shards": 4,
        "attributes": [{"name": "city", "type": "string"}]});
    post(&format!("{}/v1/tables", broker.base), &table).unwrap();
    let cities = ["Lisbon", "Porto", "Faro", "Braga"];
    let mut model: BTreeMap<String, String> = BTreeMap::new();
    let write = |round: usize, model: &mut BTreeMap<String, String>| {
        let items: Vec<Value> = (0..30)
            .map(|i| {
                let key = format!("k{}", (round * 13 + i * 7) % 120);
                let city = cities[(round + i) % cities.len()];
                model.insert(key.clone(), city.to_string());
                json!({"id": key, "city": city})
            })
            .collect();
        post(
            &format!("{}/v1/tables/rooms/records", broker.base),
            &json!(items),
        )
        .unwrap();
    };
    for round in 0..4 {
        write(round, &mut model);
    }
    let sql = |base: &str, query: &str| post(&format!("{base}/v1/sql"), &json!({ "query": query }));
    let added = sql(
        &broker.base,
        "ALTER TABLE rooms ADD SUBSPACE (city) REGIONS 4",
    )
    .unwrap();
    let name = added["name"].as_str().unwrap_or_default().to_string();
    assert!(name.starts_with("rooms__ss"), "{added}");
    // Ready on the broker at once, on the others within their table sync.
    for node in [&broker, &a, &b] {
        wait_for(Duration::from_secs(10), || {
            let described = sql(&node.base, "DESCRIBE rooms").ok()?;
            let subspaces = described["subspaces"].as_array()?.clone();
            (subspaces.len() == 1 && subspaces[0]["ready"] == json!(true)).then_some(())
        })
        .unwrap_or_else(|| panic!("{}: {:?}", node.base, sql(&node.base, "DESCRIBE rooms")));
    }
    let in_city = |model: &BTreeMap<String, String>, city: &str| -> Vec<String> {
        model
            .iter()
            .filter(|(_, c)| c.as_str() == city)
            .map(|(k, _)| k.clone())
            .collect()
    };
    let check = |model: &BTreeMap<String, String>, when: &str| {
        for city in cities {
            // The broker reads its own writes at once.
            assert_eq!(
                keys_in(&broker.base, city).unwrap(),
                in_city(model, city),
                "{when}: {city} through the broker"
            );
            // b follows the log: it agrees once it has applied the writes.
            wait_for(Duration::from_secs(10), || {
                (keys_in(&b.base, city).ok()? == in_city(model, city)).then_some(())
            })
            .unwrap_or_else(|| {
                panic!(
                    "{when}: {city} on b: {:?} against {:?}",
                    keys_in(&b.base, city),
                    in_city(model, city)
                )
            });
            let counted = sql(
                &broker.base,
                &format!("SELECT COUNT(*) FROM rooms WHERE city IN ('{city}', 'Nowhere')"),
            )
            .unwrap();
            assert_eq!(
                counted["count"],
                json!(in_city(model, city).len()),
                "{when}"
            );
        }
    };
    check(&model, "after the build");
    // Writes move records between regions; every answer follows.
    for round in 4..10 {
        write(round, &mut model);
        check(&model, &format!("round {round}"));
    }
    sql(
        &broker.base,
        &format!("ALTER TABLE rooms DROP SUBSPACE {name}"),
    )
    .unwrap();
    let described = sql(&broker.base, "DESCRIBE rooms").unwrap();
    assert_eq!(described["subspaces"], json!([]), "{described}");
    check(&model, "after the drop");
}

/// `SELECT city, COUNT(*) ... GROUP BY city` through `base`, as a map.
fn grouped_counts(base: &str) -> Result<BTreeMap<String, u64>, String> {
    let answer = post(
        &format!("{base}/v1/sql"),
        &json!({"query": "SELECT city, COUNT(*) AS n FROM rooms GROUP BY city"}),
    )?;
    let rows = answer["rows"]
        .as_array()
        .ok_or(format!("no rows: {answer}"))?;
    rows.iter()
        .map(|row| match (row["city"].as_str(), row["n"].as_u64()) {
            (Some(city), Some(n)) => Ok((city.to_string(), n)),
            _ => Err(format!("a row without city and n: {answer}")),
        })
        .collect()
}

/// How many keys of the model are in each city.
fn per_city(model: &BTreeMap<String, String>) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for city in model.values() {
        *counts.entry(city.clone()).or_insert(0) += 1;
    }
    counts
}

/// One batch putting `key` with value `v` into both tables `t1` and `t2`.
fn pair_batch(key: &str, v: u64) -> Value {
    json!({"operations": [
        {"table": "t1", "put": {"id": key, "v": v}},
        {"table": "t2", "put": {"id": key, "v": v}},
    ]})
}

#[test]
fn random_kills_lose_no_acknowledged_write_and_apply_none_in_part() {
    let test = "random_kills_lose_no_acknowledged_write_and_apply_none_in_part";
    if !have_etcd(test) {
        return;
    }
    // CI-sized by default; PUFFER_CLUSTER_KILLS=100 for the full campaign.
    let kills = common::count_from_env("PUFFER_CLUSTER_KILLS", 10) as usize;
    let dir = tempfile::tempdir().unwrap();
    let etcd = LocalEtcd::start(&dir.path().join("etcd")).unwrap();
    let names = ["a", "b", "c"];
    let roles = "coordinator,ingest,data";
    // Each incarnation joins under a new id (the killed one's lease runs out on its
    // own), on the same data directory.
    let start = |name: &str, incarnation: usize| {
        let id = format!("{name}{incarnation}");
        let node = start_node_as(dir.path(), &etcd, &id, roles);
        (node, id)
    };
    let mut nodes: Vec<(ServeProcess, String)> = Vec::new();
    let mut incarnations = [0usize; 3];
    for (i, name) in names.iter().enumerate() {
        nodes.push(start(name, incarnations[i]));
        if i == 0 {
            wait_for(Duration::from_secs(15), || leads_ingest(&nodes[0].0))
                .expect("the first node leads ingest");
        }
    }
    for table in ["t1", "t2"] {
        let schema = json!({"name": table, "key": "id", "shards": 2,
            "attributes": [{"name": "v", "type": "int"}]});
        post(&format!("{}/v1/tables", nodes[1].0.base), &schema).unwrap();
    }
    let mut acknowledged: BTreeMap<String, u64> = BTreeMap::new();
    let mut seed = 0x5EED_u64;
    let mut next = |bound: usize| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) as usize % bound
    };
    let mut batch = 0u64;
    let mut refused = 0;
    for kill in 0..kills {
        // Writes through random nodes (each hands them to whichever node leads);
        // a write without an answer may or may not be applied, never in part.
        for _ in 0..6 {
            batch += 1;
            let key = format!("k{batch}");
            let node = &nodes[next(3)].0;
            match post(
                &format!("{}/v1/batches", node.base),
                &pair_batch(&key, batch),
            ) {
                Ok(_) => {
                    acknowledged.insert(key, batch);
                }
                Err(_) => refused += 1,
            }
        }
        // A random node dies mid-stream, and comes back.
        let victim = next(3);
        nodes[victim].0.kill();
        std::thread::sleep(Duration::from_millis(200 + next(800) as u64));
        incarnations[victim] += 1;
        nodes[victim] = start(names[victim], incarnations[victim]);
        eprintln!("kill {kill}: {} killed and restarted", names[victim]);
    }
    // One last write, acknowledged, then every node must hold it (and so all before).
    let (_, took) = wait_for(Duration::from_secs(60), || {
        batch += 1;
        let key = format!("k{batch}");
        post(
            &format!("{}/v1/batches", nodes[0].0.base),
            &pair_batch(&key, batch),
        )
        .ok()
        .map(|_| acknowledged.insert(key, batch))
    })
    .expect("writes came back after the last kill");
    eprintln!(
        "{kills} kills: {} writes acknowledged, {refused} refused or unanswered; the last \
         write came {took:?} after the last restart",
        acknowledged.len()
    );
    let last = format!("k{batch}");
    for (node, id) in &nodes {
        wait_for(Duration::from_secs(30), || {
            get(&format!("{}/v1/tables/t1/records/{last}", node.base)).ok()
        })
        .unwrap_or_else(|| panic!("{id} did not follow to the last write"));
        let (t1, t2) = (
            search_keys(&node.base, "t1", json!({"all": true})).unwrap(),
            search_keys(&node.base, "t2", json!({"all": true})).unwrap(),
        );
        // None in part: both tables hold the same batches.
        assert_eq!(t1, t2, "{id}: a batch applied to one table only");
        // None lost: every acknowledged batch is there, with its values.
        for (key, v) in &acknowledged {
            for table in ["t1", "t2"] {
                let record = get(&format!("{}/v1/tables/{table}/records/{key}", node.base))
                    .unwrap_or_else(|e| panic!("{id}: acknowledged {table}/{key} is gone: {e}"));
                assert_eq!(record["record"]["v"], json!(v), "{id} {table}/{key}");
            }
        }
    }
}

#[test]
fn a_fresh_node_loads_published_segments_and_follows_the_rest() {
    if !have_etcd("a_fresh_node_loads_published_segments_and_follows_the_rest") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let etcd_server = LocalEtcd::start(&dir.path().join("etcd")).unwrap();
    let etcd = puffer_cluster::etcd::Etcd::connect(
        &puffer_cluster::etcd::EtcdConfig::new(&etcd_server.endpoint(), "puffer").unwrap(),
    )
    .unwrap();
    // Small log tables, so that a few hundred records make segments to publish.
    let env = [("PUFFER_LOG_TABLE_MAX_RECORDS", "16")];
    let fast = [
        "--publish-interval-s",
        "1",
        "--log-gc-interval-s",
        "1",
        "--etcd-history-s",
        "1",
    ];
    let roles = "coordinator,ingest,indexer,data";
    let a = start_node_with(dir.path(), &etcd_server, "a", roles, &fast, &env);
    wait_for(Duration::from_secs(15), || leads_ingest(&a)).expect("a leads ingest");
    let table = json!({"name": "rooms", "key": "id", "shards": 3,
        "attributes": [{"name": "city", "type": "string"}]});
    post(&format!("{}/v1/tables", a.base), &table).unwrap();
    let cities = ["Lisbon", "Porto", "Faro", "Braga"];
    let mut model: BTreeMap<String, String> = BTreeMap::new();
    let write = |base: &str, round: usize, model: &mut BTreeMap<String, String>| {
        // Puts, overwrites and deletes, so that segments get deletions files too.
        let mut batch = Vec::new();
        for i in 0..10 {
            let key = format!("k{}", (round * 7 + i * 13) % 400);
            if (round + i).is_multiple_of(5) && model.contains_key(&key) {
                batch.push(json!({"table": "rooms", "delete": key}));
                model.remove(&key);
            } else {
                let city = cities[(round + i) % cities.len()];
                batch.push(json!({"table": "rooms", "put": {"id": key, "city": city}}));
                model.insert(key, city.to_string());
            }
        }
        post(&format!("{base}/v1/batches"), &json!({"operations": batch}))
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
    };
    for round in 0..60 {
        write(&a.base, round, &mut model);
    }
    // Every shard published, past the start of the log.
    let uid = get(&format!("{}/v1/tables/rooms", a.base)).unwrap();
    let (published, _) = wait_for(Duration::from_secs(60), || {
        let all = puffer_cluster::segments::published(&etcd).ok()?;
        let shards: Vec<_> = all.values().collect();
        (shards.len() == 3 && shards.iter().all(|s| s.covers > 0)).then_some(all)
    })
    .unwrap_or_else(|| {
        panic!(
            "not every shard was published; a says {:?} of {uid}",
            get(&format!("{}/v1/admin/cluster", a.base))
        )
    });
    let lowest = published.values().map(|s| s.covers).min().unwrap();
    // The log is collected behind them: its first groups are gone from etcd and deep
    // storage.
    let log = puffer_cluster::scu_log::ClusterLog::new(
        etcd.clone(),
        puffer_cluster::DeepStorage::open(dir.path().join("deep").to_str().unwrap()).unwrap(),
    );
    let (first_kept, _) = wait_for(Duration::from_secs(30), || {
        log.first().ok().filter(|&first| first > 1)
    })
    .unwrap_or_else(|| {
        panic!(
            "the log was not collected; a says {:?}",
            get(&format!("{}/v1/admin/cluster", a.base))
        )
    });
    // Never past what the segments cover (they only ever cover more, so read them after).
    let covered = puffer_cluster::segments::published(&etcd)
        .unwrap()
        .values()
        .map(|s| s.covers)
        .min()
        .unwrap();
    assert!(
        first_kept <= covered + 1,
        "collected past the segments: {first_kept} > {covered} + 1"
    );
    let entries = log.entries_after(0).unwrap();
    assert!(entries.iter().all(|e| e.last >= first_kept), "{entries:?}");
    // A collection removes the index entries first, then the objects: once it is done,
    // deep storage holds the objects of the entries left and no others.
    let deep =
        puffer_cluster::DeepStorage::open(dir.path().join("deep").to_str().unwrap()).unwrap();
    let settled = wait_for(Duration::from_secs(10), || {
        let named: std::collections::BTreeSet<String> = log
            .entries_after(0)
            .ok()?
            .into_iter()
            .map(|e| e.object)
            .collect();
        let stored: std::collections::BTreeSet<String> =
            deep.list("log").ok()?.into_iter().collect();
        (named == stored).then_some(())
    });
    assert!(
        settled.is_some(),
        "objects of collected groups remain: {:?} for entries {:?}",
        deep.list("log"),
        log.entries_after(0)
    );

    // A node with an empty data directory starts from them (an indexer holds every
    // shard; a data-only node would load only those placed on it).
    let b = start_node_with(dir.path(), &etcd_server, "b", "data,indexer", &[], &[]);
    let status = get(&format!("{}/v1/admin/cluster", b.base)).unwrap();
    let seeded = &status["seeded"];
    assert_eq!(seeded["tables"], json!(1), "{status}");
    assert_eq!(seeded["shards"], json!(3), "{status}");
    assert!(seeded["bytes"].as_u64().unwrap() > 0, "{status}");
    // It followed the log only past what the segments hold.
    assert!(
        seeded["start_after"].as_u64().unwrap() >= lowest,
        "{status}"
    );
    assert!(
        status["published"].as_u64().unwrap() >= seeded["serve_from"].as_u64().unwrap(),
        "{status}"
    );
    wait_for(Duration::from_secs(10), || {
        (count(&b.base) == Some(model.len() as u64)).then_some(())
    })
    .unwrap_or_else(|| panic!("b counts {:?}, the model {}", count(&b.base), model.len()));
    agrees(&b.base, &model);
    for gone in (0..400)
        .map(|k| format!("k{k}"))
        .filter(|k| !model.contains_key(k))
    {
        match get(&format!("{}/v1/tables/rooms/records/{gone}", b.base)) {
            Ok(record) => assert!(record["record"].is_null(), "{gone} is back on b: {record}"),
            Err(e) => assert!(e.contains("404"), "{gone}: {e}"),
        }
    }
    // And follows what comes after, written through it.
    for round in 60..70 {
        write(&b.base, round, &mut model);
    }
    for node in [&a, &b] {
        wait_for(Duration::from_secs(10), || {
            (count(&node.base) == Some(model.len() as u64)).then_some(())
        })
        .expect("both hold the new writes");
        agrees(&node.base, &model);
    }
    // All along, the leader compacted etcd's history to a second: the first revisions
    // are gone, and everything above read the current ones as the model says.
    let (compacted_to, _) = wait_for(Duration::from_secs(10), || {
        let status = get(&format!("{}/v1/admin/cluster", a.base)).ok()?;
        let history = &status["etcd_history"];
        (history["compactions"].as_u64()? > 0).then(|| history["compacted_to"].as_i64())?
    })
    .unwrap_or_else(|| {
        panic!(
            "etcd's history was never compacted; a says {:?}",
            get(&format!("{}/v1/admin/cluster", a.base))
        )
    });
    assert!(compacted_to > 1, "compacted to {compacted_to}");
    let old = etcd.call(move |mut client| async move {
        let options = etcd_client::GetOptions::new().with_revision(compacted_to - 1);
        client.get("/puffer", Some(options.with_prefix())).await
    });
    let error = old.expect_err("a revision below the compaction is still readable");
    assert!(error.to_string().contains("compacted"), "{error}");
}

/// Getafix in the cluster: reads through a broker that go to one shard only make the
/// coordinator (collecting the data nodes' read counts every second) give that shard a
/// replica on every data node and routing fractions summing to 1, the others keeping
/// the floor of `--segment-replicas`; every read answers as the model says throughout;
/// the popularity survives in etcd's checkpoint and shows in `/v1/admin/placement`;
/// a time-partitioned table made and read through the broker answers as the model.
#[test]
fn a_hot_shard_gets_more_replicas_by_its_popularity() {
    let test = "a_hot_shard_gets_more_replicas_by_its_popularity";
    if !have_etcd(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let etcd = LocalEtcd::start(&dir.path().join("etcd")).unwrap();
    // a leads ingest; b and c are the coordinator candidates, each a data node holding
    // only what is placed on it.
    let a = start_node_as(dir.path(), &etcd, "a", "ingest,data");
    wait_for(Duration::from_secs(15), || leads_ingest(&a)).expect("a leads ingest");
    let more = ["--popularity-window-s", "1", "--release-grace-s", "1"];
    let b = start_node_with(dir.path(), &etcd, "b", "coordinator,data", &more, &[]);
    let c = start_node_with(dir.path(), &etcd, "c", "coordinator,data", &more, &[]);
    let broker = start_node_as(dir.path(), &etcd, "broker", "broker");
    let shards = 4;
    let table = json!({"name": "rooms", "key": "id", "shards": shards,
        "attributes": [{"name": "city", "type": "string"}]});
    post(&format!("{}/v1/tables", broker.base), &table).unwrap();
    let mut model = BTreeMap::new();
    let items: Vec<Value> = (0..80)
        .map(|i| {
            let (key, city) = (format!("k{i}"), ["Lisbon", "Porto", "Faro"][i % 3]);
            model.insert(key.clone(), city.to_string());
            json!({"id": key, "city": city})
        })
        .collect();
    post(
        &format!("{}/v1/tables/rooms/records", broker.base),
        &json!(items),
    )
    .unwrap();
    assert_eq!(count(&broker.base), Some(model.len() as u64));

    // Only keys of the hot shard are read from now on.
    let hot = 2u32;
    let hot_keys: Vec<(&String, &String)> = model
        .iter()
        .filter(|(k, _)| puffer_node::table::shard_of(k.as_bytes(), shards) == hot)
        .collect();
    assert!(!hot_keys.is_empty());
    let placement = |base: &str| get(&format!("{base}/v1/admin/placement")).unwrap();
    let replicas_of = |view: &Value, shard: u32| -> usize {
        view["shards"]
            .as_array()
            .and_then(|s| {
                s.iter()
                    .find(|s| s["table"] == "rooms" && s["shard"] == shard)
            })
            .and_then(|s| s["replicas"].as_u64())
            .unwrap_or(0) as usize
    };
    let mut reads = 0usize;
    let spread = wait_for(Duration::from_secs(40), || {
        for _ in 0..50 {
            let (key, city) = hot_keys[reads % hot_keys.len()];
            let record = get(&format!("{}/v1/tables/rooms/records/{key}", broker.base)).unwrap();
            assert_eq!(record["record"]["city"], json!(city), "{key}: {record}");
            reads += 1;
        }
        let view = placement(&broker.base);
        (replicas_of(&view, hot) == 3).then_some(view)
    });
    let (view, took) = spread.unwrap_or_else(|| {
        panic!(
            "the hot shard never got a replica on every data node: {}",
            placement(&broker.base)
        )
    });
    eprintln!(
        "{test}: the hot shard held by 3 data nodes {took:?} after its reads began ({reads} reads)"
    );
    let hot_view = view["shards"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["table"] == "rooms" && s["shard"] == hot)
        .unwrap()
        .clone();
    assert!(hot_view["popularity"].as_f64().unwrap() > 0.0, "{view}");
    let fractions: Vec<f64> = hot_view["fractions"]
        .as_array()
        .unwrap_or_else(|| panic!("no routing fractions: {view}"))
        .iter()
        .map(|f| f.as_f64().unwrap())
        .collect();
    assert_eq!(fractions.len(), 3, "{view}");
    assert!((fractions.iter().sum::<f64>() - 1.0).abs() < 1e-9, "{view}");
    for shard in (0..shards).filter(|&s| s != hot) {
        // The cold shards keep the floor of 2 (the default --segment-replicas).
        assert_eq!(replicas_of(&view, shard), 2, "shard {shard}: {view}");
    }
    assert!(view["windows_recorded"].as_u64().unwrap() >= 1, "{view}");
    assert!(
        view["policy"].as_str().unwrap().starts_with("getafix"),
        "{view}"
    );
    // Every node answers the same view (from etcd), and every key is still right.
    assert_eq!(placement(&c.base)["shards"], placement(&a.base)["shards"]);
    agrees(&broker.base, &model);

    // A time-partitioned table through the broker: its chunks are tables the leader
    // makes, placed like any other; counts by time read the chunks they overlap.
    let events = json!({"name": "events", "key": "id", "shards": 2,
        "attributes": [{"name": "ts", "type": "timestamp"}, {"name": "city", "type": "string"}],
        "partition_by": {"attribute": "ts", "granularity": "day"}});
    post(&format!("{}/v1/tables", broker.base), &events).unwrap();
    let days = ["2015-09-11", "2015-09-12", "2015-09-13"];
    let rows: Vec<Value> = (0..60)
        .map(|i| {
            let city = ["Lisbon", "Porto"][i % 2];
            let ts = format!("{}T{:02}:00:00Z", days[i % 3], i % 24);
            json!({"id": format!("e{i}"), "ts": ts, "city": city})
        })
        .collect();
    // A day a batch: the chunks stand at different SCUs, and a read over several
    // finds one snapshot for them all (the newest chunk's, read first).
    for day in 0..days.len() {
        let batch: Vec<&Value> = rows.iter().skip(day).step_by(days.len()).collect();
        post(
            &format!("{}/v1/tables/events/records", broker.base),
            &json!(batch),
        )
        .unwrap();
    }
    let by_time = [
        ("SELECT COUNT(*) FROM events", 60),
        (
            "SELECT COUNT(*) FROM events WHERE ts >= '2015-09-12' AND ts < '2015-09-13'",
            20,
        ),
        (
            "SELECT COUNT(*) FROM events WHERE ts >= '2015-09-12' AND city = 'Porto'",
            20,
        ),
    ];
    let counts_agree = |nodes: &[&ServeProcess]| {
        for (sql, want) in by_time {
            for node in nodes {
                let answer =
                    post(&format!("{}/v1/sql", node.base), &json!({"query": sql})).unwrap();
                assert_eq!(
                    answer["count"],
                    json!(want),
                    "{sql} on {}: {answer}",
                    node.base
                );
            }
        }
    };
    counts_agree(&[&broker, &a]);
    let record = get(&format!("{}/v1/tables/events/records/e4", broker.base)).unwrap();
    assert_eq!(record["record"]["city"], json!("Lisbon"), "{record}");

    // The coordinator leader is killed: the other candidate goes on from the
    // checkpointed counts (its windows continue the count, the hot shard stays hot).
    let status = get(&format!("{}/v1/admin/cluster", a.base)).unwrap();
    let (leader, other, other_id) = match status["coordinator_leader"].as_str() {
        Some("b") => (&b, &c, "c"),
        Some("c") => (&c, &b, "b"),
        _ => panic!("no coordinator leader among b and c: {status}"),
    };
    let before = placement(&a.base)["windows_recorded"].as_u64().unwrap();
    leader.kill();
    let (after, took) = wait_for(Duration::from_secs(20), || {
        let status = get(&format!("{}/v1/admin/cluster", other.base)).ok()?;
        let view = placement(&a.base);
        (status["coordinator_leader"] == json!(other_id)
            && view["windows_recorded"].as_u64()? > before)
            .then_some(view)
    })
    .unwrap_or_else(|| {
        panic!(
            "no window recorded after the failover: {}",
            placement(&a.base)
        )
    });
    eprintln!("{test}: a window recorded by the new coordinator {took:?} after the kill");
    let hot_after = after["shards"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["table"] == "rooms" && s["shard"] == hot)
        .unwrap();
    assert!(
        hot_after["popularity"].as_f64().unwrap() > 0.0,
        "the counts were lost in the failover: {after}"
    );
    agrees(&broker.base, &model);
    // Later, the chunks moved and sealed on their holders: still one snapshot.
    counts_agree(&[&broker, &a, other]);
}
