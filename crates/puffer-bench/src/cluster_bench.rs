//! `puffer-bench cluster`: the cluster's costs and failovers on loopback, against the
//! embedded single node on the same data in the same run.
//!
//! One etcd (started here), deep storage in a directory and, where moto's S3 server is
//! installed, in S3. An ingest leader ships every SCU (durable ingest rows/s); data
//! nodes (followers, each serving gRPC) catch up from deep storage (recovery MB/s);
//! a broker fans gets and searches out over them, alternated round by round with the
//! same reads on the embedded node (p50/p99: the cost of fan-out and gRPC). Then a
//! data node is killed under reads (failed reads, time to the next answer), a
//! survivor takes half the shards on again from deep storage (the work of restoring
//! the replica count), and a coordinator leader's lease is let go (failover time). Every node runs in this one
//! process, talking over loopback TCP; the machine has 2 cores.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use puffer_cluster::broker::Broker;
use puffer_cluster::etcd::{Candidate, Etcd, EtcdCatalog, LocalEtcd, MemberCard, Membership, Role};
use puffer_cluster::local_s3::LocalS3;
use puffer_cluster::rpc::client::NodeClient;
use puffer_cluster::rpc::server::RpcServer;
use puffer_cluster::scu_log::{ClusterLog, Follower, LeaderShipper};
use puffer_cluster::segments::{seed_data_dir, Publisher};
use puffer_cluster::DeepStorage;
use puffer_node::remote::{LeaderRequest, LeaderResponse};
use puffer_node::serving::NodeConfig;
use puffer_node::{Database, DatabaseOptions, ReadRequest, ReplicaRequest, TableLayout, Wait};
use puffer_query::import::{self, KeySource};
use puffer_store::{Predicate, Query, ReadOptions, Record, Value, WriteOp};
use rand::{Rng, SeedableRng};
use serde_json::{json, Value as Json};

use crate::stats::{quantile_us, round};

/// Options of `puffer-bench cluster`.
#[derive(clap::Args, Debug)]
pub struct ClusterArgs {
    /// The shared data directory (hotel_bookings.csv.gz, airbnb/).
    #[arg(long, default_value = "../shared/data")]
    data: PathBuf,
    /// Rows per SCU when ingesting.
    #[arg(long, default_value_t = 1000)]
    batch_rows: usize,
    /// Reads of each kind on each side (broker and embedded).
    #[arg(long, default_value_t = 2000)]
    reads: usize,
    /// Data nodes behind the broker.
    #[arg(long, default_value_t = 3)]
    data_nodes: usize,
    /// Rows a search returns at most (LIMIT).
    #[arg(long, default_value_t = 100)]
    search_limit: usize,
    /// Lease TTL of the failover measurement, seconds.
    #[arg(long, default_value_t = 2)]
    ttl_s: u64,
    /// Only the dataset whose label contains this (`hotel`, `airbnb`); default: all.
    #[arg(long)]
    only: Option<String>,
}

struct Dataset {
    label: &'static str,
    paths: Vec<PathBuf>,
    key: KeySource,
    eq_column: &'static str,
    contains: (&'static str, &'static str),
}

fn options(catalog: Option<Arc<dyn puffer_node::catalog::Catalog>>) -> DatabaseOptions {
    DatabaseOptions {
        node: NodeConfig {
            workers_per_replica: 1,
            ..NodeConfig::default()
        },
        catalog,
        ..DatabaseOptions::default()
    }
}

const LAYOUT: TableLayout = TableLayout {
    shards: 3,
    replicas: 1,
};

/// Writes `records` in SCUs of `batch` rows; the time it took.
fn ingest(
    db: &Database,
    table: &str,
    records: &[Record],
    batch: usize,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    for chunk in records.chunks(batch) {
        let ops = chunk.iter().cloned().map(WriteOp::Put).collect();
        db.write_batch(vec![(table.to_string(), ops)])?;
    }
    Ok(started.elapsed())
}

/// An ingest leader of cluster `cluster` shipping to `deep`.
fn leader(
    etcd_server: &LocalEtcd,
    cluster: &str,
    deep: DeepStorage,
    dir: &Path,
    ttl: Duration,
) -> anyhow::Result<(Arc<Database>, ClusterLog, Membership, Candidate, Etcd)> {
    let etcd = Etcd::connect(&etcd_server.config(cluster)?)?;
    let log = ClusterLog::new(etcd.clone(), deep);
    let card = MemberCard {
        node_id: "ingest".into(),
        roles: vec![Role::Ingest],
        http_address: "127.0.0.1:1".into(),
        rpc_address: None,
        lease: 0,
    };
    let member = Membership::join(&etcd, card, ttl)?;
    let candidate = Candidate::stand_in(
        &etcd,
        etcd.keys().ingest_election(),
        "ingest",
        member.lease(),
    );
    let leadership = candidate
        .wait_elected(Duration::from_secs(10))
        .context("the ingest leader was not elected")?;
    let db = Arc::new(Database::open_with(
        dir,
        DatabaseOptions {
            shipper: Some(Arc::new(LeaderShipper::new(log.clone(), leadership))),
            ..options(Some(Arc::new(EtcdCatalog::new(etcd.clone()))))
        },
    )?);
    Ok((db, log, member, candidate, etcd))
}

fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|e| {
            let path = e.path();
            if path.is_dir() {
                dir_bytes(&path)
            } else {
                e.metadata().map_or(0, |m| m.len())
            }
        })
        .sum()
}

fn summary(samples: &mut [Duration]) -> Json {
    json!({
        "p50_us": round(quantile_us(samples, 0.5), 1),
        "p99_us": round(quantile_us(samples, 0.99), 1),
        "per_s": round(samples.len() as f64 / samples.iter().map(Duration::as_secs_f64).sum::<f64>().max(1e-9), 0),
    })
}

/// Runs the experiment and prints the table and the JSON line.
pub fn run(args: &ClusterArgs) -> anyhow::Result<()> {
    if LocalEtcd::binary().is_none() {
        bail!("no etcd binary: install Debian's etcd-server (or set PUFFER_ETCD_BIN)");
    }
    if args.batch_rows == 0 || args.reads < 4 || args.data_nodes < 2 {
        bail!("--batch-rows >= 1, --reads >= 4 and --data-nodes >= 2");
    }
    let datasets = [
        Dataset {
            label: "hotel_bookings",
            paths: vec![args.data.join("hotel_bookings.csv.gz")],
            key: KeySource::RowNumber,
            eq_column: "country",
            contains: ("arrival_date_month", "ber"),
        },
        Dataset {
            label: "airbnb boston",
            paths: vec![args.data.join("airbnb/boston-listings.csv.gz")],
            key: KeySource::Column("id".into()),
            eq_column: "room_type",
            contains: ("name", "Cozy"),
        },
    ];
    let work = tempfile::tempdir()?;
    let etcd_server = LocalEtcd::start(&work.path().join("etcd"))?;
    let s3 = match LocalS3::start() {
        Ok(s3) => Some(s3),
        Err(e) => {
            eprintln!("*** S3 ingest not measured: {e} ***");
            None
        }
    };
    let mut results = Vec::new();
    for (d, dataset) in datasets.iter().enumerate() {
        if args
            .only
            .as_ref()
            .is_some_and(|only| !dataset.label.contains(only.as_str()))
        {
            continue;
        }
        if let Some(missing) = dataset.paths.iter().find(|p| !p.exists()) {
            eprintln!(
                "*** {} skipped: {} is missing ***",
                dataset.label,
                missing.display()
            );
            continue;
        }
        results.push(run_dataset(
            args,
            dataset,
            d,
            work.path(),
            &etcd_server,
            s3.as_ref(),
        )?);
    }
    let failover = leader_failover(&etcd_server, Duration::from_secs(args.ttl_s))?;
    print_table(&results, &failover);
    println!(
        "{}",
        json!({"experiment": "cluster", "datasets": results, "coordinator_failover": failover,
               "batch_rows": args.batch_rows, "search_limit": args.search_limit,
               "data_nodes": args.data_nodes})
    );
    Ok(())
}

fn run_dataset(
    args: &ClusterArgs,
    dataset: &Dataset,
    index: usize,
    work: &Path,
    etcd_server: &LocalEtcd,
    s3: Option<&LocalS3>,
) -> anyhow::Result<Json> {
    let imported = import::read_table(&dataset.paths, dataset.key.clone())?;
    let schema = imported.schema.clone();
    let records: Vec<Record> = imported.records().collect();
    let table = "data";
    let base = work.join(format!("d{index}"));
    let ttl = Duration::from_secs(5);

    // Durable ingest: embedded (local log only), deep storage in a directory, and S3.
    let embedded = Database::open_with(base.join("embedded"), options(None))?;
    embedded.create_table_with(table, schema.clone(), LAYOUT)?;
    let embedded_ingest = ingest(&embedded, table, &records, args.batch_rows)?;

    let deep_dir = base.join("deep");
    let deep = DeepStorage::open(deep_dir.to_str().context("a UTF-8 path")?)?;
    let (ingest_db, log, _member, _candidate, etcd) = leader(
        etcd_server,
        &format!("bench-{index}"),
        deep.clone(),
        &base.join("leader"),
        ttl,
    )?;
    ingest_db.create_table_with(table, schema.clone(), LAYOUT)?;
    let dir_ingest = ingest(&ingest_db, table, &records, args.batch_rows)?;

    let s3_ingest = match s3 {
        Some(s3) => {
            let bucket = format!("puffer-bench-{index}");
            s3.create_bucket(&bucket)?;
            let deep = DeepStorage::open_with(&format!("s3://{bucket}/log"), &s3.settings())?;
            let (db, _, _m, _c, _e) = leader(
                etcd_server,
                &format!("bench-s3-{index}"),
                deep,
                &base.join("leader-s3"),
                ttl,
            )?;
            db.create_table_with(table, schema.clone(), LAYOUT)?;
            Some(ingest(&db, table, &records, args.batch_rows)?)
        }
        None => None,
    };
    let rows_per_s = |d: Duration| round(records.len() as f64 / d.as_secs_f64(), 0);

    // Data nodes catch up from deep storage; the first one's catch-up is recovery.
    let log_bytes = dir_bytes(&deep_dir.join("log"));
    let mut nodes: Vec<(Arc<Database>, RpcServer)> = Vec::new();
    let mut recovery = Duration::ZERO;
    for n in 0..args.data_nodes {
        let db = Arc::new(Database::open_with(
            base.join(format!("data{n}")),
            DatabaseOptions {
                following: true,
                ..options(Some(Arc::new(EtcdCatalog::new(etcd.clone()))))
            },
        )?);
        let started = Instant::now();
        log.catch_up(&db)?;
        if n == 0 {
            recovery = started.elapsed();
        }
        let rpc = RpcServer::start(db.clone(), "127.0.0.1:0".parse()?)?;
        nodes.push((db, rpc));
    }
    // Durable ingest into the running cluster: the leader ships and commits every SCU
    // while the data nodes follow the log; the clock stops when the last data node
    // has applied the last SCU.
    let followers: Vec<Follower> = nodes
        .iter()
        .map(|(db, _)| Follower::start(log.clone(), db.clone(), Duration::from_millis(20)))
        .collect();
    let live_table = "data_live";
    ingest_db.create_table_with(live_table, schema.clone(), LAYOUT)?;
    let live_started = Instant::now();
    ingest(&ingest_db, live_table, &records, args.batch_rows)?;
    let last = ingest_db.published();
    let leader_done = live_started.elapsed();
    while nodes.iter().any(|(db, _)| db.published() < last) {
        if live_started.elapsed() > Duration::from_secs(600) {
            bail!("the data nodes did not follow the ingest within 10 minutes");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let live_ingest = live_started.elapsed();
    drop(followers);
    let broker = Broker::new(
        Box::new(EtcdCatalog::new(etcd.clone())),
        Duration::from_secs(5),
    );
    let addresses: Vec<(String, String)> = nodes
        .iter()
        .enumerate()
        .map(|(n, (_, rpc))| (format!("data{n}"), rpc.address().to_string()))
        .collect();
    broker.set_data_nodes(&addresses)?;

    // Reads, alternated between the embedded node and the broker, four rounds.
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let id_of = |name: &str| schema.id_of(name).map(|id| id as usize);
    let eq_id = id_of(dataset.eq_column).context("the equality column is missing")?;
    let eq_values: Vec<Value> = imported
        .rows
        .iter()
        .filter_map(|r| r.values[eq_id].clone())
        .collect();
    let requests = |rng: &mut rand::rngs::StdRng, kind: usize| -> ReadRequest {
        let read = ReadOptions::default();
        match kind {
            0 => ReadRequest::Get {
                key: records[rng.gen_range(0..records.len())].key.clone(),
                read,
            },
            1 => ReadRequest::Search {
                query: Query {
                    predicate: Predicate::Eq(
                        dataset.eq_column.into(),
                        eq_values[rng.gen_range(0..eq_values.len())].clone(),
                    ),
                    projection: None,
                    limit: Some(args.search_limit),
                    read,
                },
            },
            _ => ReadRequest::Search {
                query: Query {
                    predicate: Predicate::Contains(
                        dataset.contains.0.into(),
                        dataset.contains.1.as_bytes().to_vec(),
                    ),
                    projection: None,
                    limit: Some(args.search_limit),
                    read,
                },
            },
        }
    };
    let embedded_table = embedded.table(table)?;
    // Both sides serve from the compressed stage, as a table does once its merges
    // have run: otherwise the reads would race the data nodes' background merges and
    // measure those.
    embedded_table.compact_all()?;
    for (db, _) in &nodes {
        db.table(table)?.compact_all()?;
    }
    let mut latencies: Vec<[Vec<Duration>; 2]> = (0..3).map(|_| [Vec::new(), Vec::new()]).collect();
    for _round in 0..4 {
        for (kind, kind_latencies) in latencies.iter_mut().enumerate() {
            for (side, samples) in kind_latencies.iter_mut().enumerate() {
                for _ in 0..args.reads / 4 {
                    let request = requests(&mut rng, kind);
                    let started = Instant::now();
                    if side == 0 {
                        embedded_table
                            .read(&request, Wait::Allowed)?
                            .context("an embedded read gave no answer")?;
                    } else {
                        broker.read(table, &request)?;
                    }
                    samples.push(started.elapsed());
                }
            }
        }
    }
    // What any remote read pays at least, measured in alternation: a TCP ping-pong
    // between two threads (the machine's floor: a thread woken on each side), one
    // gRPC round trip asking a node's published snapshot (no shard work), a get
    // sent straight to the node holding its shard (gRPC and the get, no broker), and
    // the ingest leader's answer to which snapshot a read with a freshness bound must
    // see (what such a read through a node without data adds to it).
    let client = NodeClient::new(&addresses[0].1, Duration::from_secs(5))?;
    let leader_rpc = RpcServer::start(ingest_db.clone(), "127.0.0.1:0".parse()?)?;
    let leader_client = NodeClient::new(&leader_rpc.address().to_string(), Duration::from_secs(5))?;
    let floor_request = LeaderRequest::FreshnessFloor {
        bound: Duration::from_secs(1),
    };
    let uid = ingest_db.table(table)?.entry().uid;
    let shards = LAYOUT.shards;
    let mut tcp = TcpPingPong::start()?;
    let mut floors: [Vec<Duration>; 4] = Default::default();
    // Both ends of a round trip run in this process, so its CPU time over the calls
    // is what one call costs the machine, client and server together.
    let mut round_trip_cpu = Duration::ZERO;
    for _round in 0..4 {
        for _ in 0..args.reads / 4 {
            floors[0].push(tcp.round_trip()?);
        }
        let cpu_before = crate::stats::cpu_time("self");
        for _ in 0..args.reads / 4 {
            let started = Instant::now();
            client
                .published()
                .recv_timeout(Duration::from_secs(6))
                .context("no published answer")??;
            floors[1].push(started.elapsed());
        }
        round_trip_cpu += crate::stats::cpu_time("self").saturating_sub(cpu_before);
        for _ in 0..args.reads / 4 {
            let key = records[rng.gen_range(0..records.len())].key.clone();
            let shard = puffer_node::layout::shard_of(&key, shards);
            let request = ReplicaRequest::Read(ReadRequest::Get {
                key,
                read: ReadOptions::default(),
            });
            let started = Instant::now();
            client.call(table, uid, shard, None, &request)?;
            floors[2].push(started.elapsed());
        }
        for _ in 0..args.reads / 4 {
            let started = Instant::now();
            match leader_client.lead(&floor_request)? {
                LeaderResponse::FreshnessFloor { .. } => {}
                other => bail!("the leader answered a freshness floor with {other:?}"),
            }
            floors[3].push(started.elapsed());
        }
    }
    drop(leader_rpc);
    let [mut tcp_round_trips, mut round_trips, mut direct_gets, mut freshness_floors] = floors;
    let names = ["get", "eq_search", "contains_search"];
    let mut reads = serde_json::Map::new();
    for (kind, [embedded_samples, broker_samples]) in latencies.iter_mut().enumerate() {
        let (e, b) = (summary(embedded_samples), summary(broker_samples));
        let added = round(
            b["p50_us"].as_f64().unwrap_or(0.0) - e["p50_us"].as_f64().unwrap_or(0.0),
            1,
        );
        reads.insert(
            names[kind].into(),
            json!({"embedded": e, "broker": b, "added_p50_us": added}),
        );
    }

    // A data node dies under gets: failed reads, and the time to the next answer.
    let (_, killed) = nodes.remove(0);
    let killed_at = Instant::now();
    drop(killed);
    let mut failed = 0u64;
    let mut first_answer = None;
    for _ in 0..args.reads {
        let request = requests(&mut rng, 0);
        match broker.read(table, &request) {
            Ok(_) => {
                first_answer.get_or_insert_with(|| killed_at.elapsed());
            }
            Err(_) => failed += 1,
        }
    }
    let (survivor, _survivor_rpc) = nodes.remove(0);
    drop(nodes);
    let from_segments = recover_from_segments(
        &ingest_db,
        &[table, live_table],
        &etcd,
        &deep,
        &log,
        &base.join("seeded"),
        &records,
    )?;
    let replicas_back = restore_replicas(
        &survivor,
        &ingest_db,
        table,
        (&etcd, &deep, &log),
        &records,
        Duration::from_secs(args.ttl_s),
    )?;
    Ok(json!({
        "dataset": dataset.label,
        "data_nodes": args.data_nodes,
        "rows": records.len(),
        "ingest_rows_per_s": {
            "embedded": rows_per_s(embedded_ingest),
            "cluster_directory": rows_per_s(dir_ingest),
            "cluster_s3": s3_ingest.map(rows_per_s),
            "cluster_directory_with_followers": {
                "acknowledged": rows_per_s(leader_done),
                "applied_on_every_data_node": rows_per_s(live_ingest),
            },
        },
        "recovery": {
            "log_bytes": log_bytes,
            "seconds": round(recovery.as_secs_f64(), 3),
            "mb_per_s": round(log_bytes as f64 / 1e6 / recovery.as_secs_f64().max(1e-9), 1),
        },
        "recovery_from_segments": from_segments,
        "replicas_restored": replicas_back,
        "reads": reads,
        "tcp_round_trip": summary(&mut tcp_round_trips),
        "grpc_round_trip": summary(&mut round_trips),
        "grpc_round_trip_cpu_us_per_call": round(
            round_trip_cpu.as_secs_f64() * 1e6 / round_trips.len().max(1) as f64,
            1,
        ),
        "direct_get": summary(&mut direct_gets),
        "freshness_floor_from_the_leader": summary(&mut freshness_floors),
        "data_node_killed": {
            "reads_after": args.reads,
            "failed_reads": failed,
            "first_answer_ms": first_answer.map(|d| round(d.as_secs_f64() * 1e3, 2)),
        },
    }))
}

/// Recovery of a node from published segments: the leader's shards compacted and
/// published, then a fresh data directory loads them and follows the log past them;
/// its answers are checked against the leader's.
fn recover_from_segments(
    leader: &Database,
    tables: &[&str],
    etcd: &Etcd,
    deep: &DeepStorage,
    log: &ClusterLog,
    dir: &Path,
    records: &[Record],
) -> anyhow::Result<Json> {
    for name in tables {
        leader.table(name)?.compact_all()?;
    }
    let publish_started = Instant::now();
    let mut publisher = Publisher::new(etcd.clone(), deep.clone(), "bench-indexer", "run");
    let round_done = publisher.round(leader, true)?;
    let publish_took = publish_started.elapsed();
    let started = Instant::now();
    let report = seed_data_dir(etcd, deep, dir)?.context("nothing was published")?;
    let db = Database::open_with(
        dir,
        DatabaseOptions {
            following: true,
            ..options(Some(Arc::new(EtcdCatalog::new(etcd.clone()))))
        },
    )?;
    log.catch_up(&db)?;
    let took = started.elapsed();
    if db.published() < leader.published() {
        bail!(
            "the seeded node stopped at SCU {} of {}",
            db.published(),
            leader.published()
        );
    }
    let read = ReadOptions::default();
    for record in records.iter().step_by((records.len() / 500).max(1)) {
        for name in tables {
            let (mine, _) = db.table(name)?.get(&record.key, read)?;
            let (theirs, _) = leader.table(name)?.get(&record.key, read)?;
            if mine != theirs {
                bail!("the seeded node answers {name} {:?} otherwise", record.key);
            }
        }
    }
    Ok(json!({
        "published_bytes": round_done.bytes,
        "publish_seconds": round(publish_took.as_secs_f64(), 3),
        "segment_bytes": report.bytes,
        "shards": report.shards,
        "log_started_after": report.start_after,
        "seconds": round(took.as_secs_f64(), 3),
        "mb_per_s": round(report.bytes as f64 / 1e6 / took.as_secs_f64().max(1e-9), 1),
    }))
}

/// The work of bringing a killed data node's shards back to their replica count: a
/// surviving data node lets half the shards go (as it holds only those placed on it),
/// and takes them on again from their published snapshots and the log past them, as it
/// does once the coordinator places the dead node's shards on it. Answers are checked
/// against the leader. The time from a SIGKILL to full replica count adds to this the
/// lease TTL and at most one placement and one holding interval.
fn restore_replicas(
    survivor: &Database,
    leader: &Database,
    table: &str,
    (etcd, deep, log): (&Etcd, &DeepStorage, &ClusterLog),
    records: &[Record],
    ttl: Duration,
) -> anyhow::Result<Json> {
    log.catch_up(survivor)?;
    let shards: Vec<u32> = (0..LAYOUT.shards).step_by(2).collect();
    for &shard in &shards {
        survivor.release_shard(table, shard)?;
    }
    let started = Instant::now();
    let mut bytes = 0;
    let mut per_shard_ms = Vec::new();
    for &shard in &shards {
        let taken = puffer_cluster::holding::take_on(etcd, deep, log, survivor, table, shard)?;
        bytes += taken.bytes;
        per_shard_ms.push(taken.millis);
    }
    let took = started.elapsed();
    let read = ReadOptions::default();
    log.catch_up(survivor)?;
    for record in records.iter().step_by((records.len() / 500).max(1)) {
        let (mine, _) = survivor.table(table)?.get(&record.key, read)?;
        let (theirs, _) = leader.table(table)?.get(&record.key, read)?;
        if mine != theirs {
            bail!("a shard taken on answers {:?} otherwise", record.key);
        }
    }
    let upper_bound = ttl
        + puffer_cluster::placement::PLACEMENT_INTERVAL
        + puffer_cluster::holding::HOLDING_INTERVAL
        + took;
    Ok(json!({
        "shards": shards.len(),
        "bytes": bytes,
        "take_on_seconds": round(took.as_secs_f64(), 3),
        "per_shard_ms": per_shard_ms,
        "mb_per_s": round(bytes as f64 / 1e6 / took.as_secs_f64().max(1e-9), 1),
        "lease_ttl_s": ttl.as_secs(),
        "kill_to_full_replicas_at_most_s": round(upper_bound.as_secs_f64(), 3),
    }))
}

/// A coordinator leader stops renewing its lease: time until the other is elected.
fn leader_failover(etcd_server: &LocalEtcd, ttl: Duration) -> anyhow::Result<Json> {
    let etcd = Etcd::connect(&etcd_server.config("bench-failover")?)?;
    let card = |id: &str| MemberCard {
        node_id: id.into(),
        roles: vec![Role::Coordinator],
        http_address: "127.0.0.1:1".into(),
        rpc_address: None,
        lease: 0,
    };
    let a = Membership::join(&etcd, card("a"), ttl)?;
    let a_stands = Candidate::stand(&etcd, "a", a.lease());
    a_stands
        .wait_elected(Duration::from_secs(10))
        .context("a was not elected")?;
    let b = Membership::join(&etcd, card("b"), ttl)?;
    let b_stands = Candidate::stand(&etcd, "b", b.lease());
    // Let a renew a few times so the stop comes at a random point of its lease.
    std::thread::sleep(ttl + Duration::from_millis(317));
    let stopped = Instant::now();
    drop(a_stands);
    drop(a);
    b_stands
        .wait_elected(ttl * 5)
        .context("b was not elected")?;
    let took = stopped.elapsed();
    Ok(
        json!({"ttl_s": ttl.as_secs(), "failover_s": round(took.as_secs_f64(), 3),
              "within_ttl_plus_1s": took <= ttl + Duration::from_secs(1)}),
    )
}

fn print_table(results: &[Json], failover: &Json) {
    println!("cluster on loopback (every node in one process), medians of alternated rounds");
    for r in results {
        println!(
            "\n{} ({} rows)",
            r["dataset"].as_str().unwrap_or("?"),
            r["rows"]
        );
        let ingest = &r["ingest_rows_per_s"];
        println!(
            "  durable ingest rows/s: embedded {}  cluster (directory) {}  cluster (S3, moto) {}",
            ingest["embedded"], ingest["cluster_directory"], ingest["cluster_s3"]
        );
        let live = &ingest["cluster_directory_with_followers"];
        println!(
            "  into the running cluster (directory, {} data nodes following): acknowledged {} rows/s, applied on every data node {} rows/s",
            r["data_nodes"], live["acknowledged"], live["applied_on_every_data_node"]
        );
        println!(
            "  data node recovery by replaying the log: {} bytes in {} s = {} MB/s",
            r["recovery"]["log_bytes"], r["recovery"]["seconds"], r["recovery"]["mb_per_s"]
        );
        let seg = &r["recovery_from_segments"];
        println!(
            "  data node recovery from published segments: {} bytes in {} s = {} MB/s \
             (log followed after SCU {}; publishing took {} s)",
            seg["segment_bytes"],
            seg["seconds"],
            seg["mb_per_s"],
            seg["log_started_after"],
            seg["publish_seconds"]
        );
        println!(
            "  {:<16} {:>12} {:>12} {:>12} {:>12} {:>12}",
            "read", "emb p50 us", "emb p99 us", "brk p50 us", "brk p99 us", "added p50"
        );
        for kind in ["get", "eq_search", "contains_search"] {
            let k = &r["reads"][kind];
            println!(
                "  {:<16} {:>12} {:>12} {:>12} {:>12} {:>12}",
                kind,
                k["embedded"]["p50_us"],
                k["embedded"]["p99_us"],
                k["broker"]["p50_us"],
                k["broker"]["p99_us"],
                k["added_p50_us"]
            );
        }
        println!(
            "  floors: TCP ping-pong between two threads p50 {} us; one gRPC round trip \
             (published snapshot, no shard work) p50 {} us, p99 {} us, {} us of CPU a call; \
             a get sent straight to its node p50 {} us; the leader's freshness floor p50 {} us",
            r["tcp_round_trip"]["p50_us"],
            r["grpc_round_trip"]["p50_us"],
            r["grpc_round_trip"]["p99_us"],
            r["grpc_round_trip_cpu_us_per_call"],
            r["direct_get"]["p50_us"],
            r["freshness_floor_from_the_leader"]["p50_us"]
        );
        let killed = &r["data_node_killed"];
        println!(
            "  data node killed: {} of {} reads failed; first answer {} ms after the kill",
            killed["failed_reads"], killed["reads_after"], killed["first_answer_ms"]
        );
        let back = &r["replicas_restored"];
        println!(
            "  replicas restored: {} shards ({} bytes) taken on in {} s ({} MB/s); kill to \
             full replica count at most {} s with a {} s lease TTL",
            back["shards"],
            back["bytes"],
            back["take_on_seconds"],
            back["mb_per_s"],
            back["kill_to_full_replicas_at_most_s"],
            back["lease_ttl_s"]
        );
    }
    println!(
        "\ncoordinator leader failover: {} s with a {} s lease TTL",
        failover["failover_s"], failover["ttl_s"]
    );
}

/// A TCP echo on loopback between this thread and another: the least a remote call
/// costs on this machine (each side's thread is woken once per round trip).
struct TcpPingPong {
    stream: std::net::TcpStream,
    _echo: std::thread::JoinHandle<()>,
}

impl TcpPingPong {
    /// Bytes of one message, about a small gRPC call's.
    const MESSAGE_BYTES: usize = 96;

    fn start() -> anyhow::Result<TcpPingPong> {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let address = listener.local_addr()?;
        let echo = std::thread::Builder::new()
            .name("tcp-echo".into())
            .spawn(move || {
                let Ok((mut stream, _)) = listener.accept() else {
                    return;
                };
                let _ = stream.set_nodelay(true);
                let mut message = [0u8; TcpPingPong::MESSAGE_BYTES];
                // Ends when the other side closes.
                while stream.read_exact(&mut message).is_ok() {
                    if stream.write_all(&message).is_err() {
                        return;
                    }
                }
            })?;
        let stream = std::net::TcpStream::connect(address)?;
        stream.set_nodelay(true)?;
        Ok(TcpPingPong {
            stream,
            _echo: echo,
        })
    }

    fn round_trip(&mut self) -> anyhow::Result<Duration> {
        use std::io::{Read, Write};
        let mut message = [7u8; TcpPingPong::MESSAGE_BYTES];
        let started = Instant::now();
        self.stream.write_all(&message)?;
        self.stream.read_exact(&mut message)?;
        Ok(started.elapsed())
    }
}
