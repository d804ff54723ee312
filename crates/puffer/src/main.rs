//! `puffer`: the PufferDB command-line tool.
//!
//! Every command returns an [`anyhow::Result`]; `main` prints a failure as
//! `error: <full cause chain>` on stderr and exits with status 1.

use std::io;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// mimalloc, without transparent huge pages. With the system allocator a quarter of a
/// load's writer time went into malloc and free (records are built by writer threads
/// and freed by the committer); mimalloc loads Airbnb about a third faster. Huge pages
/// are off because a fault in a huge-page region may compact memory synchronously,
/// which stalled whole loads at random (25k or 70k rows/s from run to run with them on).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod load;
mod sample;
mod serve;
mod sql;
mod text;

/// PufferDB: searchable, compressed, self-tuning data store.
#[derive(Debug, Parser)]
#[command(name = "puffer", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Top-level command groups.
#[derive(Debug, Subcommand)]
enum Command {
    /// Build and query compressed full-text indexes over raw byte files.
    #[command(subcommand)]
    Text(text::TextCommand),
    /// Serve the HTTP API over a data directory (the embedded single node).
    Serve(serve::ServeArgs),
    /// Run SQL: one statement with -e, or an interactive shell.
    Sql(sql::SqlArgs),
    /// Show tables, their stages and sizes, and every replica's layers, footprint and queue.
    Status(sql::StatusArgs),
    /// Add or drop a sample layer of a replica by hand on a running server, or hand it back to the layer manager.
    Layer(sql::LayerArgs),
    /// Load CSV / JSON Lines files into a table (created if missing), in batches.
    Load(load::LoadArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Text(command) => text::run(command),
        Command::Serve(args) => serve::run(args),
        Command::Sql(args) => sql::run(args),
        Command::Status(args) => sql::status(args),
        Command::Layer(args) => sql::layer(args),
        Command::Load(args) => load::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // A closed stdout (e.g. `puffer text search ... | head`) is not a failure.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
    })
}
