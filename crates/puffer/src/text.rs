//! `puffer text ...`: build and query a compressed full-text index over a byte file.

use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use puffer_index::{BuildOptions, BuildPhase, Footprint, LayerFootprint, TextIndex, WildcardMatch};
use serde::Serialize;

/// Bytes written to stdout per `extract` step, so huge extracts stream in bounded memory.
const EXTRACT_CHUNK: u64 = 1 << 20;

/// Progress-bar resolution: the build fraction is shown in thousandths.
const PROGRESS_STEPS: u64 = 1000;

/// Commands on text indexes.
#[derive(Debug, Subcommand)]
pub enum TextCommand {
    /// Build a compressed, searchable index of FILE and save it to --out.
    Build(BuildArgs),
    /// Print how many times PATTERN occurs in the indexed text.
    Count {
        /// Index file written by `puffer text build`.
        index: PathBuf,
        #[command(flatten)]
        pattern: PatternArg,
    },
    /// Print the byte offsets where PATTERN occurs, ascending, one per line.
    Search {
        /// Index file written by `puffer text build`.
        index: PathBuf,
        #[command(flatten)]
        pattern: PatternArg,
        /// Print only the K smallest offsets.
        #[arg(long, value_name = "K")]
        limit: Option<usize>,
    },
    /// Print the byte offsets whose suffix is >= LO and whose first len(HI) bytes are
    /// <= HI (byte order), ascending, one per line.
    Range {
        /// Index file written by `puffer text build`.
        index: PathBuf,
        /// Lower bound: UTF-8 text, or hexadecimal bytes with --hex (may be empty).
        #[arg(allow_hyphen_values = true)]
        lo: String,
        /// Upper bound, compared with as many bytes of each suffix as it has (may be empty).
        #[arg(allow_hyphen_values = true)]
        hi: String,
        /// Print only the K smallest offsets.
        #[arg(long, value_name = "K")]
        limit: Option<usize>,
        /// Read LO and HI as hexadecimal bytes (e.g. 666f6f for "foo").
        #[arg(long)]
        hex: bool,
    },
    /// Print the matches of PREFIX, then at most --max-gap bytes, then SUFFIX, as
    /// `start<TAB>len` lines, ascending by start, then len.
    Wildcard {
        /// Index file written by `puffer text build`.
        index: PathBuf,
        /// Start of a match: UTF-8 text, or hexadecimal bytes with --hex.
        #[arg(allow_hyphen_values = true)]
        prefix: String,
        /// End of a match; it starts at or after the end of PREFIX.
        #[arg(allow_hyphen_values = true)]
        suffix: String,
        /// Most bytes between the end of PREFIX and the start of SUFFIX.
        #[arg(long, value_name = "N")]
        max_gap: u64,
        /// Print only the first K matches.
        #[arg(long, value_name = "K")]
        limit: Option<usize>,
        /// Read PREFIX and SUFFIX as hexadecimal bytes (e.g. 666f6f for "foo").
        #[arg(long)]
        hex: bool,
    },
    /// Write LEN bytes of the indexed text starting at OFFSET to stdout (cut at the end).
    Extract {
        /// Index file written by `puffer text build`.
        index: PathBuf,
        /// Byte offset of the first byte to write (at most the text length).
        offset: u64,
        /// Number of bytes to write.
        len: u64,
    },
    /// Print the index's size breakdown (Psi, sample layers, ratio) as JSON.
    Info {
        /// Index file written by `puffer text build`.
        index: PathBuf,
    },
}

/// Arguments of `puffer text build`.
#[derive(Debug, Args)]
pub struct BuildArgs {
    /// File whose bytes are indexed.
    file: PathBuf,
    /// Where to write the index file.
    #[arg(short, long, value_name = "INDEX")]
    out: PathBuf,
    /// Densest suffix-array sampling rate (power of two; lower = faster search, bigger index).
    #[arg(long, value_name = "N", default_value_t = BuildOptions::default().sa_rate)]
    sa_rate: u64,
    /// Densest inverse-suffix-array sampling rate (power of two; lower = faster extract, bigger index).
    #[arg(long, value_name = "N", default_value_t = BuildOptions::default().isa_rate)]
    isa_rate: u64,
    /// Number of sample layers, base included (1..=8); each layer halves the rate.
    #[arg(long, value_name = "N", default_value_t = BuildOptions::default().levels)]
    levels: u32,
    /// Psi entries per block (2..=4096; larger = smaller index, slower lookups).
    #[arg(long, value_name = "N", default_value_t = BuildOptions::default().psi_block_len)]
    psi_block: u64,
}

/// A query pattern given on the command line.
#[derive(Debug, Args)]
pub struct PatternArg {
    /// Pattern to look for: UTF-8 text, or hexadecimal bytes with --hex.
    #[arg(allow_hyphen_values = true)]
    pattern: String,
    /// Read PATTERN as hexadecimal bytes (e.g. 666f6f for "foo").
    #[arg(long)]
    hex: bool,
}

impl PatternArg {
    fn bytes(&self) -> Result<Vec<u8>> {
        arg_bytes(&self.pattern, self.hex, "pattern")
    }
}

/// The bytes of a command-line argument: its UTF-8 text, or the bytes it spells in
/// hexadecimal with `hex`; `what` names it in errors.
fn arg_bytes(text: &str, hex: bool, what: &str) -> Result<Vec<u8>> {
    if hex {
        hex::decode(text).with_context(|| format!("{what} {text:?} is not valid hex"))
    } else {
        Ok(text.as_bytes().to_vec())
    }
}

/// Runs one `puffer text` command.
pub fn run(command: TextCommand) -> Result<()> {
    match command {
        TextCommand::Build(args) => build(&args),
        TextCommand::Count { index, pattern } => {
            let pattern = pattern.bytes()?;
            let count = open_index(&index)?.count(&pattern)?;
            let mut out = io::stdout().lock();
            writeln!(out, "{count}").context("cannot write to stdout")?;
            Ok(())
        }
        TextCommand::Search {
            index,
            pattern,
            limit,
        } => {
            let pattern = pattern.bytes()?;
            let offsets = open_index(&index)?.search(&pattern, limit)?;
            write_offsets(&offsets).context("cannot write to stdout")
        }
        TextCommand::Range {
            index,
            lo,
            hi,
            limit,
            hex,
        } => {
            let lo = arg_bytes(&lo, hex, "lower bound")?;
            let hi = arg_bytes(&hi, hex, "upper bound")?;
            let offsets = open_index(&index)?.range_search(&lo, &hi, limit)?;
            write_offsets(&offsets).context("cannot write to stdout")
        }
        TextCommand::Wildcard {
            index,
            prefix,
            suffix,
            max_gap,
            limit,
            hex,
        } => {
            let prefix = arg_bytes(&prefix, hex, "prefix")?;
            let suffix = arg_bytes(&suffix, hex, "suffix")?;
            let matches = open_index(&index)?.wildcard_search(&prefix, &suffix, max_gap, limit)?;
            write_matches(&matches).context("cannot write to stdout")
        }
        TextCommand::Extract { index, offset, len } => extract(&index, offset, len),
        TextCommand::Info { index } => info(&index),
    }
}

fn open_index(path: &Path) -> Result<TextIndex> {
    TextIndex::open(path).context("cannot open index")
}

fn build(args: &BuildArgs) -> Result<()> {
    let options = BuildOptions {
        sa_rate: args.sa_rate,
        isa_rate: args.isa_rate,
        levels: args.levels,
        psi_block_len: args.psi_block,
        ..BuildOptions::default()
    };
    options.validate().context("invalid build options")?;
    let started = Instant::now();
    let text = std::fs::read(&args.file)
        .with_context(|| format!("cannot read input file {}", args.file.display()))?;
    let bar = io::stderr().is_terminal().then(progress_bar);
    let mut progress = |phase: BuildPhase, fraction: f64| {
        if let Some(bar) = &bar {
            bar.set_message(phase_name(phase));
            bar.set_position((fraction.clamp(0.0, 1.0) * PROGRESS_STEPS as f64).round() as u64);
        }
    };
    let built = TextIndex::build_with(&text, &options, &mut progress);
    let input_bytes = text.len() as u64;
    drop(text);
    let index = match built {
        Ok(index) => index,
        Err(e) => {
            if let Some(bar) = &bar {
                bar.abandon();
            }
            return Err(e).with_context(|| format!("cannot index {}", args.file.display()));
        }
    };
    if let Some(bar) = &bar {
        bar.set_message("saving");
    }
    let saved = index
        .save(&args.out)
        .with_context(|| format!("cannot save index to {}", args.out.display()));
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    saved?;
    let seconds = started.elapsed().as_secs_f64();
    let index_bytes = index.footprint().total_bytes();
    let ratio = match ratio(index_bytes, input_bytes) {
        Some(r) => format!("{r:.3}"),
        None => "n/a".to_string(),
    };
    eprintln!(
        "built {}: {input_bytes} input bytes -> {index_bytes} index bytes (ratio {ratio}) \
         in {seconds:.2} s ({:.1} MB/s)",
        args.out.display(),
        input_bytes as f64 / 1e6 / seconds.max(1e-9),
    );
    Ok(())
}

fn progress_bar() -> ProgressBar {
    let bar = ProgressBar::new(PROGRESS_STEPS);
    let style = ProgressStyle::with_template(
        "{spinner:.green} {msg:<14} [{bar:40.cyan/blue}] {percent:>3}% {elapsed_precise}",
    )
    .map(|style| style.progress_chars("=> "))
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.enable_steady_tick(Duration::from_millis(100));
    bar
}

fn phase_name(phase: BuildPhase) -> &'static str {
    match phase {
        BuildPhase::SuffixArray => "suffix array",
        BuildPhase::Scan => "sampling",
        BuildPhase::PsiStatistics => "psi statistics",
        BuildPhase::PsiEncoding => "psi encoding",
        BuildPhase::Done => "done",
    }
}

fn write_offsets(offsets: &[u64]) -> io::Result<()> {
    let mut out = BufWriter::new(io::stdout().lock());
    for offset in offsets {
        writeln!(out, "{offset}")?;
    }
    out.flush()
}

/// One `start<TAB>len` line per match.
fn write_matches(matches: &[WildcardMatch]) -> io::Result<()> {
    let mut out = BufWriter::new(io::stdout().lock());
    for m in matches {
        writeln!(out, "{}\t{}", m.start, m.len)?;
    }
    out.flush()
}

fn extract(path: &Path, offset: u64, len: u64) -> Result<()> {
    let index = open_index(path)?;
    // Validates the offset even when nothing is to be written.
    let mut chunk = index.extract(offset, len.min(EXTRACT_CHUNK))?;
    let end = offset.saturating_add(len).min(index.text_len());
    let mut at = offset;
    let mut out = io::stdout().lock();
    loop {
        out.write_all(&chunk).context("cannot write to stdout")?;
        at += chunk.len() as u64;
        if at >= end || chunk.is_empty() {
            break;
        }
        chunk = index.extract(at, (end - at).min(EXTRACT_CHUNK))?;
    }
    out.flush().context("cannot write to stdout")
}

/// `numerator / denominator`, or `None` for an empty text.
fn ratio(numerator: u64, denominator: u64) -> Option<f64> {
    (denominator > 0).then(|| numerator as f64 / denominator as f64)
}

/// JSON shape of `puffer text info`.
#[derive(Debug, Serialize)]
struct Info {
    text_bytes: u64,
    total_bytes: u64,
    /// `total_bytes / text_bytes`; null for an empty text.
    ratio: Option<f64>,
    /// Index bits per text byte; null for an empty text.
    bits_per_char: Option<f64>,
    psi: PsiInfo,
    sa_layers: Vec<LayerInfo>,
    isa_layers: Vec<LayerInfo>,
    layers: u32,
    max_layers: u32,
}

#[derive(Debug, Serialize)]
struct PsiInfo {
    headers_bytes: u64,
    superblocks_bytes: u64,
    stream_bytes: u64,
    tables_bytes: u64,
    total_bytes: u64,
}

#[derive(Debug, Serialize)]
struct LayerInfo {
    level: u32,
    rate: u64,
    bytes: u64,
    entries: u64,
    filled_entries: u64,
}

impl From<&LayerFootprint> for LayerInfo {
    fn from(layer: &LayerFootprint) -> Self {
        LayerInfo {
            level: layer.level,
            rate: layer.rate,
            bytes: layer.bytes,
            entries: layer.entries,
            filled_entries: layer.filled_entries,
        }
    }
}

impl Info {
    fn new(footprint: &Footprint, layers: u32, max_layers: u32) -> Self {
        let total_bytes = footprint.total_bytes();
        let text_bytes = footprint.text_bytes;
        Info {
            text_bytes,
            total_bytes,
            ratio: ratio(total_bytes, text_bytes),
            bits_per_char: ratio(total_bytes * 8, text_bytes),
            psi: PsiInfo {
                headers_bytes: footprint.psi_headers_bytes,
                superblocks_bytes: footprint.psi_superblocks_bytes,
                stream_bytes: footprint.psi_stream_bytes,
                tables_bytes: footprint.psi_tables_bytes,
                total_bytes: footprint.psi_bytes(),
            },
            sa_layers: footprint.sa_layers.iter().map(LayerInfo::from).collect(),
            isa_layers: footprint.isa_layers.iter().map(LayerInfo::from).collect(),
            layers,
            max_layers,
        }
    }
}

fn info(path: &Path) -> Result<()> {
    let index = open_index(path)?;
    let info = Info::new(&index.footprint(), index.layer_count(), index.max_layers());
    let json = serde_json::to_string_pretty(&info).context("cannot encode info as JSON")?;
    writeln!(io::stdout().lock(), "{json}").context("cannot write to stdout")
}
