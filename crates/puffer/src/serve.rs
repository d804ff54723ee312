//! `puffer serve`: the embedded single-node server.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
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
    #[arg(long)]
    sample: bool,
}

/// Runs the server until Ctrl-C.
pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let mut config = ServerConfig::load(args.config.as_deref())?;
    if let Some(data) = args.data {
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
    runtime.block_on(puffer_server::serve(config, |bound| {
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
