//! `puffer serve`: the embedded single node, or, with `--etcd`, a node of a cluster.

use std::net::SocketAddr;
use std::path::PathBuf;

use std::sync::Arc;

use anyhow::Context;
use puffer_cluster::etcd::{EtcdConfig, Role};
use puffer_cluster::node::{ClusterConfig, ClusterNode, PlacementPolicy, DEFAULT_FOLLOW_INTERVAL};
use puffer_server::ServerConfig;

/// Arguments of `puffer serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Data directory (default: ./puffer-data, or PUFFER_DATA, or the config file's).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Address to listen on (default 127.0.0.1:7878; port 0 picks a free one).
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// TOML configuration file (environment variables PUFFER_* override it).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Create the bundled sample table `bookings` if the data directory lacks it.
    #[arg(long, conflicts_with = "etcd")]
    sample: bool,
    /// Join a cluster whose metadata is in this etcd (host:port[,host:port]); without
    /// it the node is the embedded single node.
    #[arg(long)]
    etcd: Option<String>,
    /// The cluster's name (its keys live under /puffer/NAME/ in etcd).
    #[arg(long, default_value = "puffer", requires = "etcd")]
    cluster: String,
    /// Deep storage: a directory shared by the nodes, or s3://bucket/prefix (default:
    /// DATA/deep-storage, for a cluster on one machine).
    #[arg(long, requires = "etcd")]
    deep_storage: Option<String>,
    /// Roles of this node: any of coordinator, ingest, indexer, data, broker.
    #[arg(
        long,
        default_value = "coordinator,ingest,indexer,data,broker",
        requires = "etcd"
    )]
    roles: String,
    /// This node's id in the cluster (default: node-PORT).
    #[arg(long, requires = "etcd")]
    node_id: Option<String>,
    /// Where the gRPC service of a data node listens (default: the HTTP port + 1000).
    #[arg(long, requires = "etcd")]
    rpc_listen: Option<SocketAddr>,
    /// Membership lease TTL in seconds: a node that stops is out after this.
    #[arg(long, default_value_t = 5, requires = "etcd")]
    lease_ttl_s: u64,
    /// How often an indexer publishes its shards' new segments to deep storage, in
    /// seconds (1 to 3600).
    #[arg(long, default_value_t = 5, requires = "etcd")]
    publish_interval_s: u64,
    /// How often the ingest leader removes the log's groups that every shard's
    /// published segments cover and every node has applied, in seconds (1 to 86400).
    #[arg(long, default_value_t = 60, requires = "etcd")]
    log_gc_interval_s: u64,
    /// Replicas of each shard the coordinator places on the data nodes (1 to 16); reads
    /// of a shard go to its holders.
    #[arg(long, default_value_t = 2, requires = "etcd")]
    segment_replicas: usize,
    /// How long a data node keeps a shard no longer placed on it before it lets it go,
    /// in seconds (0 to 3600; a placement that changes back meanwhile costs nothing).
    #[arg(long, default_value_t = 10, requires = "etcd")]
    release_grace_s: u64,
    /// How often the coordinator leader collects the data nodes' read counts and
    /// re-plans replicas by popularity (Getafix), in seconds (1 to 3600; 0: never,
    /// every shard keeps --segment-replicas holders).
    #[arg(long, default_value_t = 60, requires = "etcd")]
    popularity_window_s: u64,
    /// Seconds of query work a second each data node takes on when the coordinator
    /// plans sample layers and replicas together from the curves the nodes measure (0
    /// to 1024; 0: replicas by popularity alone, layers left to each node).
    #[arg(long, default_value_t = puffer_cluster::node::DEFAULT_JOINT_WORK_BUDGET, requires = "etcd")]
    joint_work_budget: f64,
    /// How the coordinator chooses replicas by popularity: `getafix` (ModifiedBestFit,
    /// with layers when --joint-work-budget is above 0) or `scarlett` (the baseline: a
    /// replica per read in flight).
    #[arg(long, default_value = "getafix", requires = "etcd")]
    placement_policy: String,
    /// How often a broker reads the coordinator's routing table again, in seconds (0.5
    /// to 3600); sooner when a read meets a shard the table does not place yet.
    #[arg(long, default_value_t = puffer_cluster::node::DEFAULT_ROUTING_POLL.as_secs_f64(), requires = "etcd")]
    routing_poll_s: f64,
    /// How much of etcd's history the ingest leader keeps, in seconds (1 to 604800): it
    /// compacts older revisions, or etcd grows until its quota stops every write. 0:
    /// never (for an etcd its operator compacts, say with --auto-compaction-retention).
    #[arg(long, default_value_t = puffer_cluster::etcd::history::DEFAULT_HISTORY_RETENTION.as_secs(), requires = "etcd")]
    etcd_history_s: u64,
}

/// Runs the server until Ctrl-C.
pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    exit_clearly_on_sigbus();
    let mut config = ServerConfig::load(args.config.as_deref())?;
    if let Some(data) = args.data.clone() {
        config.data_dir = data;
    }
    if let Some(listen) = args.listen {
        config.listen = listen;
    }
    if args.sample {
        let db = puffer_node::Database::open(&config.data_dir, Default::default())
            .with_context(|| format!("opening {}", config.data_dir.display()))?;
        if crate::sample::ensure_sample(&db)? {
            eprintln!(
                "created the sample table {:?} ({} rows)",
                crate::sample::SAMPLE_TABLE,
                crate::sample::SAMPLE_ROWS
            );
        }
    }
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let data_dir = config.data_dir.clone();
    let state = match &args.etcd {
        None => puffer_server::AppState::open(config)?,
        Some(etcd) => {
            let node = Arc::new(join_cluster(&args, etcd, &config)?);
            // A fresh data directory starts from the segments published in deep storage.
            if let Some(seeded) = node
                .seed(&config.data_dir)
                .map_err(|e| anyhow::anyhow!("joining the cluster: {e}"))?
            {
                eprintln!(
                    "loaded {} shards of {} tables from deep storage ({} bytes in {} ms); \
                     following the log from SCU {}",
                    seeded.shards,
                    seeded.tables,
                    seeded.bytes,
                    seeded.millis,
                    seeded.start_after + 1
                );
            }
            let status_node = node.clone();
            let status_db: Arc<std::sync::OnceLock<Arc<puffer_node::Database>>> = Arc::default();
            let status_db_set = status_db.clone();
            let state = puffer_server::AppState::open_with(
                config,
                |options| node.database_options(options),
                Some(Box::new(move |view| match (status_db.get(), view) {
                    (Some(db), puffer_server::StatusView::Cluster) => status_node.status(db),
                    (Some(_), puffer_server::StatusView::Placement) => {
                        status_node.placement_status()
                    }
                    (None, _) => serde_json::json!({"mode": "cluster", "starting": true}),
                })),
            )?;
            let _ = status_db_set.set(state.db.clone());
            node.start(state.db.clone())
                .map_err(|e| anyhow::anyhow!("joining the cluster: {e}"))?;
            // A node whose lease expired must stop: others may have taken its work.
            std::thread::spawn(move || loop {
                if let Some(why) = node.lost() {
                    eprintln!("puffer: leaving the cluster: {why}");
                    std::process::exit(75);
                }
                std::thread::sleep(std::time::Duration::from_millis(200));
            });
            state
        }
    };
    runtime.block_on(puffer_server::serve_state(state, |bound| {
        // The first line of stdout is the address (tests and scripts read it).
        println!("listening on http://{bound}");
        eprintln!(
            "PufferDB serving {} (Ctrl-C to stop). Try:\n  \
             curl -s http://{bound}/v1/sql -d '{{\"query\": \"SELECT COUNT(*) FROM bookings WHERE country = '\\''PRT'\\''\"}}'\n  \
             puffer sql --url http://{bound} -e \"SELECT id, hotel, adr FROM bookings WHERE adr > 240 LIMIT 5\"",
            data_dir.display()
        );
    }))?;
    Ok(())
}

/// Connects this node to its cluster (etcd and deep storage) from the flags.
fn join_cluster(
    args: &ServeArgs,
    etcd: &str,
    config: &ServerConfig,
) -> anyhow::Result<ClusterNode> {
    let listen = config.listen;
    if listen.port() == 0 {
        anyhow::bail!("a cluster node needs a fixed --listen port (its address is in etcd)");
    }
    let rpc_listen = match args.rpc_listen {
        Some(address) => address,
        None => {
            let port = listen
                .port()
                .checked_add(1000)
                .context("the HTTP port + 1000 is past 65535; give --rpc-listen")?;
            SocketAddr::new(listen.ip(), port)
        }
    };
    let deep_storage = args
        .deep_storage
        .clone()
        .unwrap_or_else(|| config.data_dir.join("deep-storage").display().to_string());
    let cluster = ClusterConfig {
        etcd: EtcdConfig::new(etcd, &args.cluster)?,
        deep_storage,
        node_id: args
            .node_id
            .clone()
            .unwrap_or_else(|| format!("node-{}", listen.port())),
        roles: Role::parse_list(&args.roles)?,
        http_address: listen.to_string(),
        rpc_listen,
        lease_ttl: std::time::Duration::from_secs(args.lease_ttl_s),
        follow_interval: DEFAULT_FOLLOW_INTERVAL,
        publish_interval: std::time::Duration::from_secs(args.publish_interval_s),
        log_gc_interval: std::time::Duration::from_secs(args.log_gc_interval_s),
        segment_replicas: args.segment_replicas,
        release_grace: std::time::Duration::from_secs(args.release_grace_s),
        popularity_window: std::time::Duration::from_secs(args.popularity_window_s),
        joint_work_budget: args.joint_work_budget,
        placement_policy: PlacementPolicy::parse(&args.placement_policy)?,
        routing_poll: std::time::Duration::try_from_secs_f64(args.routing_poll_s)
            .map_err(|e| anyhow::anyhow!("--routing-poll-s {}: {e}", args.routing_poll_s))?,
        history_retention: std::time::Duration::from_secs(args.etcd_history_s),
    };
    ClusterNode::connect(cluster).map_err(|e| anyhow::anyhow!("joining the cluster: {e}"))
}

/// Exit status of a server whose mapped data file was cut under it.
pub const SIGBUS_EXIT: i32 = 74;

/// Segments are read through memory maps. When another program cuts a mapped file
/// under the server, the next read past the new end raises SIGBUS, which would kill the
/// process with no word of why. This handler says why and exits with [`SIGBUS_EXIT`]:
/// no answer is given from the cut file, nothing acknowledged is lost (it is in the
/// log), and the next start checks every file and names the damaged one.
fn exit_clearly_on_sigbus() {
    extern "C" fn on_sigbus(_: libc::c_int) {
        const MESSAGE: &[u8] = b"puffer: a data file mapped in memory was cut under the server \
            (SIGBUS): stopping before any answer is read from it; nothing acknowledged is lost \
            (it is in the log); start the server again: its check at open names the file\n";
        // SAFETY: write(2) and _exit(2) are async-signal-safe; MESSAGE is a static.
        unsafe {
            libc::write(2, MESSAGE.as_ptr().cast(), MESSAGE.len());
            libc::_exit(SIGBUS_EXIT);
        }
    }
    // SAFETY: installs a handler that only calls async-signal-safe functions.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigbus as *const () as libc::sighandler_t;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut());
    }
}
