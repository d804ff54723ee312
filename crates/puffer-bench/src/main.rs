//! PufferDB benchmarks. Each experiment prints a readable table and, on its last
//! line, one JSON object with every figure.

/// mimalloc, without transparent huge pages. With the system allocator a quarter of a
/// load's writer time went into malloc and free (records are built by writer threads
/// and freed by the committer); mimalloc loads Airbnb about a third faster. Huge pages
/// are off because a fault in a huge-page region may compact memory synchronously,
/// which stalled whole loads at random (25k or 70k rows/s from run to run with them on).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Hands the memory a load freed back to the system now. mimalloc returns freed memory
/// lazily, from whichever thread allocates next: after a load that freed hundreds of
/// megabytes, the first queries measured paid for it (one query of each run stalled
/// 20 to 50 ms; with purging off, none did), so a benchmark calls this between loading
/// an engine and timing it.
pub(crate) fn return_freed_memory() {
    // SAFETY: mi_collect takes no pointers and may be called from any thread at any time.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

mod analytics_bench;
mod answers_bench;
mod blowfish;
mod cluster_bench;
mod columns_bench;
mod consistency_bench;
mod getafix;
mod http_bench;
mod hyperspace;
mod index_bench;
mod layer_shift;
mod loading;
mod oracle;
mod overload_bench;
mod peers;
mod plot;
mod records;
mod served;
mod stats;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "puffer-bench",
    about = "PufferDB benchmarks: readable table, then one JSON line"
)]
struct Cli {
    #[command(subcommand)]
    experiment: Experiment,
}

#[derive(Subcommand)]
enum Experiment {
    /// Build the compressed index over a file and measure footprint, build, count, locate, extract and the layer curve.
    Index(index_bench::IndexArgs),
    /// Drive mixed get / search / put traffic (Zipf keys) against a running server.
    Http(http_bench::HttpArgs),
    /// Load CSV / JSON-lines records into a shard and measure load speed, freshness lag, footprint and query latency.
    Records(records::RecordsArgs),
    /// Compare PufferDB with SQLite FTS5, PostgreSQL pg_trgm and ripgrep on the same data and queries.
    Peers(peers::PeersArgs),
    /// Reproduce BlowFish's experiments on one node: gradual and spiked load, replicas, versus replication.
    Blowfish(blowfish::BlowfishArgs),
    /// LazyBase's consistency experiment against a running server: update pairs over
    /// shards and tables, readers checking that no SCU is seen in half and no read
    /// goes back.
    Consistency(consistency_bench::ConsistencyArgs),
    /// The cluster on loopback: durable ingest (directory and S3), data node recovery,
    /// broker reads against the embedded node, a data node killed, leader failover.
    Cluster(cluster_bench::ClusterArgs),
    /// Getafix's evaluation on a simulated cluster of 15 and 25 nodes with service times
    /// measured on the real store: Getafix against Scarlett, uniform replication and
    /// random routing, shifting popularity, and the joint replicas-and-layers planner.
    Getafix(getafix::GetafixArgs),
    /// Getafix against Scarlett and uniform replication on a real cluster on loopback
    /// (etcd, a leader, data-only nodes, a broker; needs target/release/puffer), through
    /// the broker.
    GetafixCluster(getafix::loopback::LoopbackArgs),
    /// A server of its own (needs target/release/puffer) at its normal load, at ten times
    /// the requests it serves at once with slow clients, and back: refusals, latency,
    /// resident memory and recovery time.
    Overload(overload_bench::OverloadArgs),
    /// Large answers over HTTP in JSON, JSON Lines, CSV and Arrow from one or more
    /// `puffer` binaries in alternation: time to the first and the last byte, size, and
    /// the server's peak memory during the answer.
    Answers(answers_bench::AnswersArgs),
    /// Hyperspace hashing on the Inside Airbnb listings, embedded: calibration of the
    /// model, its accuracy on workloads A, B and C, the configurator against the paper's
    /// heuristics, and adaptation from A to B.
    Hyperspace(hyperspace::HyperspaceArgs),
    /// Attribute layers following the query mix: equality searches on one attribute,
    /// then on another, against an adaptive node; when the layers came and went, and
    /// the throughput before and after.
    LayerShift(layer_shift::LayerShiftArgs),
    /// Equality searches of thousands of rows asking for keys, a few columns or whole
    /// records: what reading only the asked fields saves.
    Columns(columns_bench::ColumnsArgs),
    /// Analytics SQL (groups, top-k, scans, a join, time buckets) on the hotel bookings
    /// and wikiticker, PufferDB on DataFusion beside SQLite; every answer compared.
    Analytics(analytics_bench::AnalyticsArgs),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().experiment {
        Experiment::Index(args) => index_bench::run(&args),
        Experiment::Hyperspace(args) => hyperspace::run(&args),
        Experiment::LayerShift(args) => layer_shift::run(&args),
        Experiment::Columns(args) => columns_bench::run(&args),
        Experiment::Analytics(args) => analytics_bench::run(&args),
        Experiment::Records(args) => records::run(&args),
        Experiment::Http(args) => http_bench::run(&args),
        Experiment::Peers(args) => peers::run(&args),
        Experiment::Blowfish(args) => blowfish::run(&args),
        Experiment::Consistency(args) => consistency_bench::run(&args),
        Experiment::Cluster(args) => cluster_bench::run(&args),
        Experiment::Getafix(args) => getafix::run(&args),
        Experiment::GetafixCluster(args) => getafix::loopback::run(&args),
        Experiment::Overload(args) => overload_bench::run(&args),
        Experiment::Answers(args) => answers_bench::run(&args),
    }
}
