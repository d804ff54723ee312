//! PufferDB benchmarks. Each experiment prints a readable table and, on its last
//! line, one JSON object with every figure.

mod index_bench;
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
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().experiment {
        Experiment::Index(args) => index_bench::run(&args),
    }
}
