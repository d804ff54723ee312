//! Subspaces on a cluster, against a model: a subspace added through a node without
//! data is built by the ingest leader; writes handed to the leader move records between
//! regions on every node that follows the log; searches and counts through the node
//! without data (fanned out by its broker to the regions only) and on a data node equal
//! a naive scan of a `BTreeMap` of the acknowledged records; a search fixing the
//! subspace's attributes reads only its matching regions; and the drop goes back to the
//! table. The same cluster shows reads with a freshness bound through the node without
//! data seeing what the leader acknowledged before the bound.

mod common;

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use puffer_adapt::hyperspace::SearchShape;
use puffer_cluster::etcd::{Candidate, Etcd, MemberCard, Membership, Role};
use puffer_cluster::remote::ClusterRemote;
use puffer_cluster::rpc::server::RpcServer;
use puffer_cluster::scu_log::{ClusterLog, LeaderShipper};
use puffer_cluster::DeepStorage;
use puffer_node::hyperspace::{HyperspaceOptions, MeasuredCalibration};
use puffer_node::remote::Remote;
use puffer_node::remote::{LeaderRequest, ServedSearches, MAX_SENT_SHAPES};
use puffer_node::{Database, DatabaseOptions, ReadAnswer, ReadRequest, TableLayout, Wait};
use puffer_query::QueryError;
use puffer_store::{
    AttrType, Attribute, Predicate, Query, ReadOptions, Record, Schema, Value, WriteOp,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const CITIES: [&str; 5] = ["Lisbon", "Porto", "Faro", "Braga", "Evora"];
const KEYS: u32 = 300;
const TTL: Duration = Duration::from_secs(5);

type Model = BTreeMap<Vec<u8>, Record>;

fn schema() -> Schema {
    let attribute = |name: &str, attr_type| Attribute {
        name: name.into(),
        attr_type,
    };
    Schema::new(
        "id",
        vec![
            attribute("city", AttrType::String),
            attribute("price", AttrType::Int),
        ],
    )
    .unwrap()
}

fn random_record(rng: &mut StdRng) -> Record {
    let mut record = Record::new(format!("k{:03}", rng.gen_range(0..KEYS)));
    if rng.gen_bool(0.95) {
        let city = CITIES[rng.gen_range(0..CITIES.len())];
        record.values.insert("city".into(), Value::str(city));
    }
    if rng.gen_bool(0.95) {
        record
            .values
            .insert("price".into(), Value::Int(rng.gen_range(10..1000)));
    }
    record
}

/// A batch of puts (records moving between regions as their values change) and
/// deletes, applied to the model too.
fn random_batch(rng: &mut StdRng, model: &mut Model) -> Vec<WriteOp> {
    let mut ops = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for _ in 0..rng.gen_range(1..12) {
        let record = random_record(rng);
        if !seen.insert(record.key.clone()) {
            continue;
        }
        if rng.gen_bool(0.15) {
            model.remove(&record.key);
            ops.push(WriteOp::Delete(record.key));
        } else {
            model.insert(record.key.clone(), record.clone());
            ops.push(WriteOp::Put(record));
        }
    }
    ops
}

fn random_predicate(rng: &mut StdRng) -> Predicate {
    let city = |rng: &mut StdRng| Value::str(CITIES[rng.gen_range(0..CITIES.len())]);
    let prices = |rng: &mut StdRng| {
        let low = rng.gen_range(0..1000);
        Predicate::Range {
            attribute: "price".into(),
            lower: Bound::Included(Value::Int(low)),
            upper: Bound::Excluded(Value::Int(low + rng.gen_range(1..400))),
        }
    };
    match rng.gen_range(0..5) {
        0 => Predicate::Eq("city".into(), city(rng)),
        1 => Predicate::In("city".into(), vec![city(rng), city(rng)]),
        2 => prices(rng),
        3 => Predicate::And(vec![Predicate::Eq("city".into(), city(rng)), prices(rng)]),
        _ => Predicate::Or(vec![Predicate::Eq("city".into(), city(rng)), prices(rng)]),
    }
}

/// The oracle: the predicate on a record, by the rules written out.
fn holds(predicate: &Predicate, record: &Record) -> bool {
    let value = |name: &str| record.values.get(name);
    match predicate {
        Predicate::Eq(name, v) => value(name) == Some(v),
        Predicate::In(name, vs) => value(name).is_some_and(|x| vs.contains(x)),
        Predicate::Range {
            attribute,
            lower: Bound::Included(Value::Int(low)),
            upper: Bound::Excluded(Value::Int(high)),
        } => matches!(value(attribute), Some(Value::Int(x)) if low <= x && x < high),
        Predicate::And(parts) => parts.iter().all(|p| holds(p, record)),
        Predicate::Or(parts) => parts.iter().any(|p| holds(p, record)),
        other => panic!("the test makes no {other:?}"),
    }
}

fn search(db: &Database, predicate: &Predicate, limit: Option<usize>) -> Vec<Record> {
    let request = ReadRequest::Search {
        query: Query {
            predicate: predicate.clone(),
            projection: None,
            limit,
            read: ReadOptions::default(),
        },
    };
    match db.read("rooms", &request, Wait::Allowed).unwrap() {
        Some(ReadAnswer::Rows(result)) => result.rows,
        other => panic!("a search answered {other:?}"),
    }
}

fn count(db: &Database, predicate: &Predicate) -> u64 {
    let request = ReadRequest::Count {
        predicate: predicate.clone(),
        read: ReadOptions::default(),
    };
    match db.read("rooms", &request, Wait::Allowed).unwrap() {
        Some(ReadAnswer::Count { count, .. }) => count,
        other => panic!("a count answered {other:?}"),
    }
}

/// Searches (whole and limited) and counts on `db` equal a naive scan of the model.
fn agrees(db: &Database, model: &Model, rng: &mut StdRng, who: &str) {
    for _ in 0..12 {
        let predicate = random_predicate(rng);
        let expected: Vec<&Record> = model.values().filter(|r| holds(&predicate, r)).collect();
        let found = search(db, &predicate, None);
        assert_eq!(
            found.iter().collect::<Vec<_>>(),
            expected,
            "{who}: search {predicate:?}"
        );
        assert_eq!(
            count(db, &predicate),
            expected.len() as u64,
            "{who}: count {predicate:?}"
        );
        // A limited search: as many rows as asked (or all), each a match, none twice.
        let limited = search(db, &predicate, Some(3));
        assert_eq!(limited.len(), expected.len().min(3), "{who}: {predicate:?}");
        for row in &limited {
            assert_eq!(model.get(&row.key), Some(row), "{who}: {predicate:?}");
            assert!(holds(&predicate, row), "{who}: {predicate:?}");
        }
        let mut keys: Vec<&Vec<u8>> = limited.iter().map(|r| &r.key).collect();
        keys.dedup();
        assert_eq!(keys.len(), limited.len(), "{who}: a row twice");
    }
}

/// Reads served per shard of `table` on `nodes`, summed.
fn reads_by_shard(nodes: &[&Database], table: &str) -> BTreeMap<u32, u64> {
    let mut reads = BTreeMap::new();
    for node in nodes {
        for counted in node.shard_reads() {
            if counted.table == table {
                *reads.entry(counted.shard).or_insert(0) += counted.reads;
            }
        }
    }
    reads
}

/// A data node: a follower of the log serving its shards over gRPC.
struct DataNode {
    database: Arc<Database>,
    rpc: RpcServer,
}

/// An etcd, an ingest leader with its gRPC service holding table `rooms` (4 shards)
/// with 40 random batches written, two data nodes following the log, and a node
/// without data (`front`) that reads through its broker and hands writes and table
/// changes to the leader; every database with `hyperspace`.
struct Cluster {
    _server: puffer_cluster::etcd::LocalEtcd,
    _dir: tempfile::TempDir,
    log: ClusterLog,
    _member: Membership,
    /// The leader's gRPC service (taken to stop it).
    leader_rpc: Option<RpcServer>,
    leader: Arc<Database>,
    data: Vec<DataNode>,
    remote: Arc<ClusterRemote>,
    front: Database,
    rng: StdRng,
    model: Model,
}

impl Cluster {
    /// `None` (after a loud skip) without an etcd binary.
    fn start(test: &str, hyperspace: HyperspaceOptions) -> Option<Cluster> {
        let (server, dir) = common::etcd_or_skip(test)?;
        let etcd = Etcd::connect(&server.config("subspaces").unwrap()).unwrap();
        let deep = DeepStorage::open(dir.path().join("deep").to_str().unwrap()).unwrap();
        let log = ClusterLog::new(etcd.clone(), deep);
        let options = || DatabaseOptions {
            hyperspace: hyperspace.clone(),
            ..common::node_options(&etcd)
        };
        let leader_rpc_address = format!(
            "127.0.0.1:{}",
            puffer_cluster::etcd::local::free_port().unwrap()
        );
        let card = MemberCard {
            node_id: "ingest".into(),
            roles: vec![Role::Ingest],
            http_address: "127.0.0.1:1".into(),
            rpc_address: Some(leader_rpc_address.clone()),
            lease: 0,
        };
        let member = Membership::join(&etcd, card, TTL).unwrap();
        let leadership = Candidate::stand_in(
            &etcd,
            etcd.keys().ingest_election(),
            "ingest",
            member.lease(),
        )
        .wait_elected(Duration::from_secs(10))
        .expect("the ingest leader is elected");
        let leader = Arc::new(
            Database::open_with(
                dir.path().join("leader"),
                DatabaseOptions {
                    shipper: Some(Arc::new(LeaderShipper::new(log.clone(), leadership))),
                    ..options()
                },
            )
            .unwrap(),
        );
        let leader_rpc =
            RpcServer::start(leader.clone(), leader_rpc_address.parse().unwrap()).unwrap();
        let layout = TableLayout {
            shards: 4,
            replicas: 1,
        };
        leader.create_table_with("rooms", schema(), layout).unwrap();
        let mut rng = StdRng::seed_from_u64(19);
        let mut model = Model::new();
        for _ in 0..40 {
            let ops = random_batch(&mut rng, &mut model);
            leader.write_batch(vec![("rooms".into(), ops)]).unwrap();
        }
        let data: Vec<DataNode> = (0..2)
            .map(|i| {
                let database = Arc::new(
                    Database::open_with(
                        dir.path().join(format!("data{i}")),
                        DatabaseOptions {
                            following: true,
                            ..options()
                        },
                    )
                    .unwrap(),
                );
                log.catch_up(&database).unwrap();
                let rpc =
                    RpcServer::start(database.clone(), "127.0.0.1:0".parse().unwrap()).unwrap();
                DataNode { database, rpc }
            })
            .collect();
        let remote = Arc::new(ClusterRemote::new(
            etcd.clone(),
            true,
            false,
            Duration::from_secs(5),
        ));
        let addresses: Vec<(String, String)> = data
            .iter()
            .enumerate()
            .map(|(i, node)| (format!("data{i}"), node.rpc.address().to_string()))
            .collect();
        remote.broker().unwrap().set_data_nodes(&addresses).unwrap();
        let front = Database::open_with(
            dir.path().join("front"),
            DatabaseOptions {
                following: true,
                remote: Some(remote.clone() as Arc<dyn Remote>),
                ..options()
            },
        )
        .unwrap();
        front.sync_tables().unwrap();
        Some(Cluster {
            _server: server,
            _dir: dir,
            log,
            _member: member,
            leader_rpc: Some(leader_rpc),
            leader,
            data,
            remote,
            front,
            rng,
            model,
        })
    }

    /// What a data node's follower thread does: the log, and the catalog's tables (a
    /// drop writes no SCU).
    fn catch_up(&self) {
        for node in &self.data {
            self.log.catch_up(&node.database).unwrap();
            node.database.sync_tables().unwrap();
        }
    }
}

#[test]
fn subspaces_on_a_cluster_agree_with_a_model_and_read_only_their_regions() {
    let test = "subspaces_on_a_cluster_agree_with_a_model_and_read_only_their_regions";
    let Some(cluster) = Cluster::start(test, HyperspaceOptions::default()) else {
        return;
    };
    let (leader, data, remote, front) = (
        &*cluster.leader,
        &cluster.data,
        &cluster.remote,
        &cluster.front,
    );
    let (mut rng, mut model) = (cluster.rng.clone(), cluster.model.clone());
    let catch_up = || cluster.catch_up();
    agrees(front, &model, &mut rng, "front, no subspace");

    // Added through the node without data: built by the leader, ready everywhere.
    let name = front
        .add_subspace("rooms", &["city".into(), "price".into()], 16)
        .unwrap();
    catch_up();
    for (who, db) in [
        ("leader", leader),
        ("front", front),
        ("data0", &*data[0].database),
    ] {
        let described = db.describe_subspaces("rooms");
        assert_eq!(described.len(), 1, "{who}: {described:?}");
        assert!(described[0].ready, "{who}: {described:?}");
        assert_eq!(described[0].name, name, "{who}");
        assert_eq!(described[0].regions, 16, "{who}");
    }
    let of = leader.table(&name).unwrap().subspace_of().unwrap();
    assert!(
        of.ready_at > 0 && of.ready_at <= leader.published(),
        "{of:?}"
    );

    // Writes through the node without data move records between regions; every node
    // answers as the model does, at every step.
    for step in 0..30 {
        let ops = random_batch(&mut rng, &mut model);
        front.write_batch(vec![("rooms".into(), ops)]).unwrap();
        if step % 5 == 4 {
            catch_up();
            agrees(front, &model, &mut rng, &format!("front, step {step}"));
            agrees(
                &data[1].database,
                &model,
                &mut rng,
                &format!("data1, step {step}"),
            );
        }
    }

    // A search fixing both attributes reads only its regions, fanned out by the broker
    // (each region read once, on one node), and nothing of the table's own shards.
    let nodes: Vec<&Database> = data.iter().map(|n| &*n.database).collect();
    let predicate = Predicate::And(vec![
        Predicate::Eq("city".into(), Value::str("Porto")),
        Predicate::Range {
            attribute: "price".into(),
            lower: Bound::Included(Value::Int(100)),
            upper: Bound::Excluded(Value::Int(200)),
        },
    ]);
    let regions = of.regions_for(&predicate, "id").unwrap();
    assert!(regions.len() < 16, "{regions:?}");
    let (table_before, regions_before) = (
        reads_by_shard(&nodes, "rooms"),
        reads_by_shard(&nodes, &name),
    );
    let expected: Vec<&Record> = model.values().filter(|r| holds(&predicate, r)).collect();
    assert_eq!(
        search(front, &predicate, None).iter().collect::<Vec<_>>(),
        expected
    );
    let (table_after, regions_after) = (
        reads_by_shard(&nodes, "rooms"),
        reads_by_shard(&nodes, &name),
    );
    assert_eq!(table_before, table_after, "the table's shards were read");
    for region in 0..16u32 {
        let read = regions_after.get(&region).copied().unwrap_or(0)
            - regions_before.get(&region).copied().unwrap_or(0);
        let wanted = u64::from(regions.contains(&region));
        assert_eq!(
            read, wanted,
            "region {region} read {read} times; asked {regions:?}"
        );
    }

    // Bad region reads are refused with what was wrong.
    let broker = remote.broker().unwrap();
    let request = ReadRequest::Count {
        predicate: Predicate::All,
        read: ReadOptions::default(),
    };
    for (table, asked) in [
        ("rooms", vec![0]),
        (name.as_str(), vec![16]),
        (name.as_str(), vec![]),
    ] {
        let error = broker.read_regions(table, &request, &asked).unwrap_err();
        assert!(
            matches!(error, QueryError::Invalid(_)),
            "{table} {asked:?}: {error}"
        );
    }

    // Dropped through the node without data: searches read the table again, and agree.
    front.drop_subspace("rooms", &name).unwrap();
    catch_up();
    assert!(front.describe_subspaces("rooms").is_empty());
    assert!(data[0].database.describe_subspaces("rooms").is_empty());
    let before = reads_by_shard(&nodes, "rooms");
    assert_eq!(
        search(front, &predicate, None).iter().collect::<Vec<_>>(),
        expected
    );
    let after = reads_by_shard(&nodes, "rooms");
    assert_ne!(before, after, "the table was not read after the drop");
    agrees(front, &model, &mut rng, "front, after the drop");
}

#[test]
fn the_leaders_configurator_hears_the_searches_other_nodes_served() {
    let test = "the_leaders_configurator_hears_the_searches_other_nodes_served";
    let hyperspace = HyperspaceOptions {
        auto: true,
        ..HyperspaceOptions::default()
    };
    let Some(mut cluster) = Cluster::start(test, hyperspace) else {
        return;
    };
    cluster
        .leader
        .set_hyperspace_calibration(MeasuredCalibration {
            beta_s_per_object: 4e-6,
            region_cost_s: 2.5e-4,
            fan_out_cost_s: 1e-4,
            condition_cost_s: 0.0,
            sent_row_cost_s: 5e-6,
            write_rate_cost_s2: 0.0,
            catch_up_cost_s2: 0.0,
            fresh_window_s: 0.0,
            region_upkeep_s_per_s: 0.0,
            upkeep_half_rate_per_s: 0.0,
            alpha: 0.4,
            max_throughput_ops_per_s: 10_000.0,
            update_fixed_cost_s: None,
        })
        .unwrap();
    // Searches served by the node without data (and one by the leader itself): each
    // city's records, some limited to a page of 5.
    for i in 0..40 {
        let city = Value::str(CITIES[i % CITIES.len()]);
        let page = (i % 4 == 0).then_some(5);
        let found = search(&cluster.front, &Predicate::Eq("city".into(), city), page);
        assert!(page.is_none_or(|p| found.len() <= p));
    }
    search(
        &cluster.leader,
        &Predicate::Eq("city".into(), Value::str("Faro")),
        None,
    );
    // The front node's pass sends them; the leader counts them as its own.
    cluster.front.tune_tables();
    let front_status = cluster.front.hyperspace_status("rooms").unwrap();
    let decision = front_status.decision.unwrap_or_default();
    assert!(decision.contains("40 searches sent"), "{decision}");
    let status = cluster.leader.hyperspace_status("rooms").unwrap();
    let searches: Vec<u64> = status.profile.searches.iter().map(|(_, n)| *n).collect();
    assert_eq!(searches, vec![41], "{:?}", status.profile.searches);
    // A second pass sends nothing more.
    cluster.front.tune_tables();
    let status = cluster.leader.hyperspace_status("rooms").unwrap();
    assert_eq!(status.profile.searches[0].1, 41);

    // The leader's pass builds a subspace on city (its only candidate: with no
    // updates, it asks one region where the table asks four).
    cluster.leader.tune_tables();
    let built = cluster.leader.describe_subspaces("rooms");
    assert_eq!(
        built.len(),
        1,
        "{built:?}: {:?}",
        cluster.leader.hyperspace_status("rooms").unwrap().decision
    );
    assert_eq!(built[0].attributes, vec!["city".to_string()]);
    assert!(built[0].ready);
    cluster.catch_up();
    cluster.front.sync_tables().unwrap();
    assert_eq!(cluster.front.describe_subspaces("rooms"), built);
    let mut rng = cluster.rng.clone();
    agrees(
        &cluster.front,
        &cluster.model,
        &mut rng,
        "front, configured",
    );
    // Writes go on through the front node and keep the subspace.
    for _ in 0..10 {
        let ops = random_batch(&mut cluster.rng, &mut cluster.model);
        cluster
            .front
            .write_batch(vec![("rooms".into(), ops)])
            .unwrap();
    }
    cluster.catch_up();
    agrees(&cluster.front, &cluster.model, &mut rng, "front, written");

    // Bad reports are refused: a stale uid, too many shapes.
    let uid = cluster.leader.table("rooms").unwrap().uid();
    let stale = LeaderRequest::Searches {
        table: "rooms".into(),
        uid: uid + 1000,
        searches: Vec::new(),
    };
    assert!(matches!(
        cluster.leader.lead(stale),
        Err(QueryError::UnknownTable(_))
    ));
    let one = ServedSearches {
        shape: SearchShape::default(),
        count: 1,
        page_rows: None,
    };
    let many = LeaderRequest::Searches {
        table: "rooms".into(),
        uid,
        searches: vec![one; MAX_SENT_SHAPES + 1],
    };
    assert!(matches!(
        cluster.leader.lead(many),
        Err(QueryError::Limit(_))
    ));
}

/// Ten new records keyed `sintra{from}` on, in a city no random record has (a count of
/// it tells which of these batches a read saw).
fn sintra_batch(from: u32) -> Vec<WriteOp> {
    (from..from + 10)
        .map(|i| {
            let mut record = Record::new(format!("sintra{i:03}"));
            record.values.insert("city".into(), Value::str("Sintra"));
            WriteOp::Put(record)
        })
        .collect()
}

/// A read with a freshness bound through the node without data sees every write the
/// ingest leader acknowledged longer than the bound ago, even one written elsewhere
/// (not through this node, so its own writes do not tell) that the data nodes have
/// not applied yet: it waits for them. A bound longer than the write's age does not
/// make it wait. Both for a one-table read and for the snapshot a read of several
/// tables chooses.
#[test]
fn bounded_reads_through_a_front_see_what_the_leader_acknowledged_before_the_bound() {
    let test = "bounded_reads_through_a_front_see_what_the_leader_acknowledged_before_the_bound";
    let Some(cluster) = Cluster::start(test, HyperspaceOptions::default()) else {
        return;
    };
    let sintra = Predicate::Eq("city".into(), Value::str("Sintra"));
    let count_within = |bound: Duration| {
        let request = ReadRequest::Count {
            predicate: sintra.clone(),
            read: ReadOptions {
                freshness: Some(bound),
                ..ReadOptions::default()
            },
        };
        match cluster
            .front
            .read("rooms", &request, Wait::Allowed)
            .unwrap()
        {
            Some(ReadAnswer::Count { count, .. }) => count,
            other => panic!("a count answered {other:?}"),
        }
    };
    let write_sintra = |from: u32| {
        cluster
            .leader
            .write_batch(vec![("rooms".into(), sintra_batch(from))])
            .unwrap()
    };
    let catch_up_later = || {
        std::thread::sleep(Duration::from_millis(300));
        cluster.catch_up();
    };
    let hour = Duration::from_secs(3600);
    let first = write_sintra(0);
    std::thread::sleep(Duration::from_millis(300));
    // Nothing was written an hour ago: the data nodes' snapshot will do.
    assert_eq!(count_within(hour), 0);
    // Acknowledged 300 ms ago, a bound of 100 ms: the read waits for the data nodes.
    std::thread::scope(|scope| {
        scope.spawn(catch_up_later);
        assert_eq!(count_within(Duration::from_millis(100)), 10);
    });
    let second = write_sintra(10);
    assert!(second > first);
    std::thread::sleep(Duration::from_millis(300));
    let chosen = |bound: Duration| {
        cluster
            .front
            .choose_snapshot(ReadOptions {
                freshness: Some(bound),
                ..ReadOptions::default()
            })
            .unwrap()
    };
    assert_eq!(chosen(hour), first);
    std::thread::scope(|scope| {
        scope.spawn(catch_up_later);
        assert!(chosen(Duration::from_millis(100)) >= second);
    });
    assert_eq!(count_within(Duration::ZERO), 20);
    // Only the leader knows when writes were acknowledged; a follower says so.
    let asked = LeaderRequest::FreshnessFloor { bound: hour };
    let error = cluster.data[0].database.lead(asked).unwrap_err();
    assert!(error.to_string().contains("ingest leader"), "{error}");
}

/// With the ingest leader unreachable, a read with a freshness bound through the node
/// without data still answers, at least at the log's committed tail: fresher than
/// asked (it sees a write of a moment ago that an hour's bound would not need), never
/// staler.
#[test]
fn bounded_reads_without_a_leader_read_at_least_the_committed_tail() {
    let test = "bounded_reads_without_a_leader_read_at_least_the_committed_tail";
    let Some(mut cluster) = Cluster::start(test, HyperspaceOptions::default()) else {
        return;
    };
    let written = cluster
        .leader
        .write_batch(vec![("rooms".into(), sintra_batch(0))])
        .unwrap();
    drop(cluster.leader_rpc.take());
    let cluster = &cluster;
    let request = ReadRequest::Count {
        predicate: Predicate::Eq("city".into(), Value::str("Sintra")),
        read: ReadOptions {
            freshness: Some(Duration::from_secs(3600)),
            ..ReadOptions::default()
        },
    };
    std::thread::scope(|scope| {
        scope.spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            cluster.catch_up();
        });
        match cluster
            .front
            .read("rooms", &request, Wait::Allowed)
            .unwrap()
        {
            Some(ReadAnswer::Count { count, snapshot }) => {
                assert_eq!(count, 10);
                assert!(snapshot.snapshot >= written, "{snapshot:?}");
            }
            other => panic!("a count answered {other:?}"),
        }
    });
}
