//! End-to-end tests of the `puffer` binary: every query is checked against a naive
//! scan of the same generated text.

mod common;

use common::{
    naive_occurrences, naive_range, naive_wildcard, XorShift, TEXT_RANGES, TEXT_WILDCARDS,
};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tempfile::TempDir;

/// Patterns checked against the oracle: whole words, fragments, spans across the
/// separator, single bytes, and strings that never occur.
const PATTERNS: &[&str] = &[
    "puffer",
    "fish",
    "a",
    "an",
    "ana",
    "banana",
    "sea salt",
    "h\ns",
    " ",
    "\n",
    "er b",
    "zzz",
    "pufferfishx",
];

const WORDS: &[&str] = &[
    "puffer", "fish", "banana", "bandana", "sea", "salt", "coral", "reef", "index", "suffix",
    "array", "psi", "layer", "sample", "query", "an", "a", "ocean", "blow", "fin",
];

/// About `len` bytes of pseudo-random words separated by spaces and newlines.
fn generate_text(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = XorShift(seed);
    let mut text = Vec::with_capacity(len + 16);
    while text.len() < len {
        let word = WORDS[(rng.next() % WORDS.len() as u64) as usize];
        text.extend_from_slice(word.as_bytes());
        text.push(if rng.next() & 7 == 0 { b'\n' } else { b' ' });
    }
    text
}

fn puffer<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    Command::new(env!("CARGO_BIN_EXE_puffer"))
        .args(args)
        .output()
        .expect("cannot run the puffer binary")
}

fn stdout_text(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).expect("stdout is UTF-8")
}

fn stderr_text(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn assert_success(output: &Output, what: &str) {
    assert!(
        output.status.success(),
        "{what} failed with {:?}: {}",
        output.status,
        stderr_text(output)
    );
}

/// The command failed cleanly: exit status 1, an `error:` line mentioning `needle`,
/// and no panic.
fn assert_clean_failure(output: &Output, needle: &str) {
    let stderr = stderr_text(output);
    assert_eq!(output.status.code(), Some(1), "stderr: {stderr}");
    assert!(stderr.starts_with("error: "), "stderr: {stderr}");
    assert!(stderr.contains(needle), "stderr lacks {needle:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "stderr: {stderr}");
}

fn parse_offsets(output: &Output) -> Vec<u64> {
    stdout_text(output)
        .lines()
        .map(|line| line.parse().expect("an offset per line"))
        .collect()
}

/// `start<TAB>len` lines of `puffer text wildcard`.
fn parse_matches(output: &Output) -> Vec<(u64, u64)> {
    stdout_text(output)
        .lines()
        .map(|line| {
            let (start, len) = line.split_once('\t').expect("start<TAB>len");
            (
                start.parse().expect("a start"),
                len.parse().expect("a length"),
            )
        })
        .collect()
}

/// A generated text and an index built over it, in a temporary directory.
struct Fixture {
    dir: TempDir,
    text: Vec<u8>,
    index_path: PathBuf,
    build_stderr: String,
}

impl Fixture {
    fn new(build_flags: &[&str]) -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let text = generate_text(0x5eed_cafe_f00d_d00d, 6000);
        let text_path = dir.path().join("text.txt");
        let index_path = dir.path().join("text.idx");
        std::fs::write(&text_path, &text).expect("write text");
        let mut args: Vec<&OsStr> = vec![
            "text".as_ref(),
            "build".as_ref(),
            text_path.as_os_str(),
            "--out".as_ref(),
            index_path.as_os_str(),
        ];
        args.extend(build_flags.iter().map(OsStr::new));
        let output = puffer(&args);
        assert_success(&output, "build");
        assert!(index_path.is_file(), "build wrote no index");
        Fixture {
            build_stderr: stderr_text(&output),
            dir,
            text,
            index_path,
        }
    }

    fn index(&self) -> &Path {
        &self.index_path
    }

    fn run(&self, command: &str, rest: &[&str]) -> Output {
        let mut args: Vec<&OsStr> = vec!["text".as_ref(), command.as_ref(), self.index().as_ref()];
        args.extend(rest.iter().map(OsStr::new));
        puffer(&args)
    }

    fn check_against_oracle(&self) {
        for pattern in PATTERNS {
            let expected = naive_occurrences(&self.text, pattern.as_bytes());

            let count = self.run("count", &[pattern]);
            assert_success(&count, "count");
            assert_eq!(
                stdout_text(&count),
                format!("{}\n", expected.len()),
                "count of {pattern:?}"
            );

            let search = self.run("search", &[pattern]);
            assert_success(&search, "search");
            assert_eq!(parse_offsets(&search), expected, "search of {pattern:?}");
        }
    }
}

#[test]
fn count_and_search_match_a_naive_scan() {
    let fixture = Fixture::new(&[]);
    fixture.check_against_oracle();
}

#[test]
fn build_flags_are_applied_and_queries_still_match() {
    let fixture = Fixture::new(&[
        "--sa-rate",
        "4",
        "--isa-rate",
        "2",
        "--levels",
        "3",
        "--psi-block",
        "16",
    ]);
    fixture.check_against_oracle();

    let info = fixture.run("info", &[]);
    assert_success(&info, "info");
    let json: serde_json::Value = serde_json::from_str(&stdout_text(&info)).expect("JSON");
    assert_eq!(json["layers"], 3);
    assert_eq!(json["max_layers"], 3);
    let min_rate = |key: &str| {
        json[key]
            .as_array()
            .expect("layer array")
            .iter()
            .map(|layer| layer["rate"].as_u64().expect("rate"))
            .min()
    };
    assert_eq!(min_rate("sa_layers"), Some(4));
    assert_eq!(min_rate("isa_layers"), Some(2));
}

#[test]
fn search_limit_returns_the_smallest_offsets() {
    let fixture = Fixture::new(&[]);
    for pattern in ["a", "fish", " s"] {
        let all = naive_occurrences(&fixture.text, pattern.as_bytes());
        assert!(all.len() > 3, "{pattern:?} is too rare for this test");
        let limited = fixture.run("search", &[pattern, "--limit", "3"]);
        assert_success(&limited, "search --limit");
        assert_eq!(parse_offsets(&limited), all[..3], "limit 3 of {pattern:?}");
    }
    let none = fixture.run("search", &["zzz", "--limit", "3"]);
    assert_success(&none, "search --limit");
    assert!(none.stdout.is_empty());
}

#[test]
fn range_and_wildcard_match_a_naive_scan() {
    let fixture = Fixture::new(&[]);
    let text = &fixture.text;
    for (lo, hi) in TEXT_RANGES {
        let expected = naive_range(text, lo.as_bytes(), hi.as_bytes());
        let range = fixture.run("range", &[lo, hi]);
        assert_success(&range, "range");
        assert_eq!(parse_offsets(&range), expected, "range {lo:?}..{hi:?}");
        let limited = fixture.run("range", &[lo, hi, "--limit", "3"]);
        assert_success(&limited, "range --limit");
        assert_eq!(
            parse_offsets(&limited),
            expected[..expected.len().min(3)],
            "range {lo:?}..{hi:?} --limit 3"
        );
        let hex = fixture.run("range", &["--hex", &hex::encode(lo), &hex::encode(hi)]);
        assert_success(&hex, "range --hex");
        assert_eq!(parse_offsets(&hex), expected, "range --hex {lo:?}..{hi:?}");
    }
    for (prefix, suffix, gap) in TEXT_WILDCARDS {
        let expected = naive_wildcard(text, prefix.as_bytes(), suffix.as_bytes(), *gap);
        let gap = gap.to_string();
        let label = format!("wildcard {prefix:?} {gap} {suffix:?}");
        let wildcard = fixture.run("wildcard", &[prefix, suffix, "--max-gap", &gap]);
        assert_success(&wildcard, "wildcard");
        assert_eq!(parse_matches(&wildcard), expected, "{label}");
        let limited = fixture.run(
            "wildcard",
            &[prefix, suffix, "--max-gap", &gap, "--limit", "2"],
        );
        assert_success(&limited, "wildcard --limit");
        assert_eq!(
            parse_matches(&limited),
            expected[..expected.len().min(2)],
            "{label} --limit 2"
        );
        let (prefix, suffix) = (hex::encode(prefix), hex::encode(suffix));
        let hex = fixture.run("wildcard", &[&prefix, &suffix, "--max-gap", &gap, "--hex"]);
        assert_success(&hex, "wildcard --hex");
        assert_eq!(parse_matches(&hex), expected, "{label} --hex");
    }
    let none = fixture.run("range", &["z", "a", "--limit", "3"]);
    assert_success(&none, "range --limit");
    assert!(none.stdout.is_empty());
}

#[test]
fn wildcard_needs_a_whole_max_gap() {
    let fixture = Fixture::new(&[]);
    for rest in [
        &["puffer", "fish"][..],
        &["puffer", "fish", "--max-gap", "-1"],
        &["puffer", "fish", "--max-gap", "1.5"],
        &["puffer", "fish", "--max-gap", "two"],
    ] {
        let output = fixture.run("wildcard", rest);
        let stderr = stderr_text(&output);
        assert_eq!(output.status.code(), Some(2), "{rest:?}: {stderr}");
        assert!(stderr.contains("--max-gap"), "{rest:?}: {stderr}");
        assert!(output.stdout.is_empty());
    }
    let missing_hi = fixture.run("range", &["a"]);
    assert_eq!(missing_hi.status.code(), Some(2));
    assert!(stderr_text(&missing_hi).contains("<HI>"));
}

#[test]
fn extract_returns_the_text_slice() {
    let fixture = Fixture::new(&[]);
    let n = fixture.text.len() as u64;
    let cases = [
        (0, 1),
        (0, 100),
        (17, 333),
        (n / 2, 1000),
        (n - 10, 10),
        (n - 10, 500), // cut at the end of the text
        (n, 5),        // at the end: nothing
        (123, 0),
        (0, n),
    ];
    for (offset, len) in cases {
        let output = fixture.run("extract", &[&offset.to_string(), &len.to_string()]);
        assert_success(&output, "extract");
        let start = offset as usize;
        let end = (offset + len).min(n) as usize;
        assert_eq!(
            output.stdout,
            &fixture.text[start..end],
            "extract {offset} {len}"
        );
    }
}

#[test]
fn hex_patterns_are_decoded() {
    let fixture = Fixture::new(&[]);
    for pattern in ["fish", "sea salt", "h\ns", "a"] {
        let expected = naive_occurrences(&fixture.text, pattern.as_bytes());
        let encoded = hex::encode(pattern);

        let count = fixture.run("count", &[&encoded, "--hex"]);
        assert_success(&count, "count --hex");
        assert_eq!(stdout_text(&count), format!("{}\n", expected.len()));

        let search = fixture.run("search", &["--hex", &encoded.to_uppercase()]);
        assert_success(&search, "search --hex");
        assert_eq!(parse_offsets(&search), expected);
    }
}

#[test]
fn info_reports_the_footprint_as_json() {
    let fixture = Fixture::new(&[]);
    let output = fixture.run("info", &[]);
    assert_success(&output, "info");
    let json: serde_json::Value =
        serde_json::from_str(&stdout_text(&output)).expect("info prints valid JSON");
    assert_eq!(json["text_bytes"], fixture.text.len() as u64);

    let total = json["total_bytes"].as_u64().expect("total_bytes");
    let psi = &json["psi"];
    let psi_parts: u64 = [
        "headers_bytes",
        "superblocks_bytes",
        "stream_bytes",
        "tables_bytes",
    ]
    .iter()
    .map(|key| psi[key].as_u64().expect("psi part"))
    .sum();
    assert_eq!(psi["total_bytes"], psi_parts);
    let layer_bytes = |key: &str| -> u64 {
        json[key]
            .as_array()
            .expect("layer array")
            .iter()
            .map(|layer| {
                for field in ["level", "rate", "entries", "filled_entries"] {
                    assert!(layer[field].is_u64(), "{key} entry lacks {field}");
                }
                layer["bytes"].as_u64().expect("bytes")
            })
            .sum()
    };
    assert_eq!(
        total,
        psi_parts + layer_bytes("sa_layers") + layer_bytes("isa_layers")
    );
    let ratio = json["ratio"].as_f64().expect("ratio");
    assert!((ratio - total as f64 / fixture.text.len() as f64).abs() < 1e-9);
    let bits = json["bits_per_char"].as_f64().expect("bits_per_char");
    assert!((bits - 8.0 * ratio).abs() < 1e-9);
    assert!(json["layers"].as_u64().expect("layers") >= 1);
    assert!(json["max_layers"].as_u64() >= json["layers"].as_u64());
}

#[test]
fn build_prints_one_summary_line_and_no_progress_bar_off_a_terminal() {
    let fixture = Fixture::new(&[]);
    let lines: Vec<&str> = fixture.build_stderr.lines().collect();
    assert_eq!(lines.len(), 1, "stderr: {:?}", fixture.build_stderr);
    assert!(lines[0].contains(&format!("{} input bytes", fixture.text.len())));
    assert!(lines[0].contains("MB/s"));
    assert!(!fixture.build_stderr.contains('\r'));
}

#[test]
fn missing_input_file_is_a_clean_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("no-such-file.txt");
    let out = dir.path().join("out.idx");
    let output = puffer([
        OsStr::new("text"),
        OsStr::new("build"),
        missing.as_os_str(),
        OsStr::new("--out"),
        out.as_os_str(),
    ]);
    assert_clean_failure(&output, "no-such-file.txt");
    assert!(!out.exists());
}

#[test]
fn invalid_build_options_are_a_clean_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("in.txt");
    std::fs::write(&input, b"some text").expect("write");
    let out = dir.path().join("out.idx");
    let output = puffer([
        OsStr::new("text"),
        OsStr::new("build"),
        input.as_os_str(),
        OsStr::new("--out"),
        out.as_os_str(),
        OsStr::new("--sa-rate"),
        OsStr::new("3"),
    ]);
    assert_clean_failure(&output, "sa_rate");
}

#[test]
fn missing_index_is_a_clean_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("no-such-index.idx");
    let output = puffer([
        OsStr::new("text"),
        OsStr::new("count"),
        missing.as_os_str(),
        OsStr::new("fish"),
    ]);
    assert_clean_failure(&output, "no-such-index.idx");
}

#[test]
fn corrupt_index_is_a_clean_error() {
    let fixture = Fixture::new(&[]);
    let mut bytes = std::fs::read(fixture.index()).expect("read index");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    let corrupt = fixture.dir.path().join("corrupt.idx");
    std::fs::write(&corrupt, &bytes).expect("write corrupt index");

    for command in [
        vec!["count", "fish"],
        vec!["search", "fish"],
        vec!["range", "a", "b"],
        vec!["wildcard", "puffer", "fish", "--max-gap", "3"],
        vec!["extract", "0", "10"],
        vec!["info"],
    ] {
        let mut args: Vec<&OsStr> = vec!["text".as_ref(), command[0].as_ref(), corrupt.as_ref()];
        args.extend(command[1..].iter().map(OsStr::new));
        let output = puffer(&args);
        assert_clean_failure(&output, "corrupt");
        assert!(output.stdout.is_empty());
    }

    // Garbage that is not an index at all.
    std::fs::write(&corrupt, &fixture.text).expect("write");
    let output = puffer([OsStr::new("text"), OsStr::new("info"), corrupt.as_os_str()]);
    assert_clean_failure(&output, "corrupt");
}

#[test]
fn bad_hex_is_a_clean_error() {
    let fixture = Fixture::new(&[]);
    for bad in ["zz", "abc", "66 69"] {
        for command in ["count", "search"] {
            let output = fixture.run(command, &[bad, "--hex"]);
            assert_clean_failure(&output, "not valid hex");
            assert!(output.stdout.is_empty());
        }
        for (command, args) in [
            ("range", vec![bad, "66", "--hex"]),
            ("range", vec!["66", bad, "--hex"]),
            ("wildcard", vec![bad, "66", "--hex", "--max-gap", "1"]),
            ("wildcard", vec!["66", bad, "--hex", "--max-gap", "1"]),
        ] {
            let output = fixture.run(command, &args);
            assert_clean_failure(&output, "not valid hex");
            assert!(output.stdout.is_empty());
        }
    }
}

#[test]
fn invalid_queries_are_clean_errors() {
    let fixture = Fixture::new(&[]);
    let n = fixture.text.len() as u64;
    let past_end = fixture.run("extract", &[&(n + 1).to_string(), "1"]);
    assert_clean_failure(&past_end, "past the end");
    let empty = fixture.run("count", &[""]);
    assert_clean_failure(&empty, "empty");
    let empty_hex = fixture.run("search", &["", "--hex"]);
    assert_clean_failure(&empty_hex, "empty");
    for rest in [["", "fish"], ["puffer", ""]] {
        let output = fixture.run("wildcard", &[rest[0], rest[1], "--max-gap", "1"]);
        assert_clean_failure(&output, "empty");
    }
}
