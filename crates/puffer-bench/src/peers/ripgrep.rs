//! ripgrep, the data-scan baseline: one `rg -F -c -j1 -a --no-config -e PATTERN FILE`
//! process per query, which counts matching lines (`-a`: never stop at what looks like
//! binary data). Text: the prepared corpus as one file. Records: contains queries only,
//! on one file per contains attribute holding each record's value on its own line
//! (line breaks inside values written as the first control byte that none of the values
//! hold, and patterns mapped the same way, so that a value contains a pattern exactly
//! when its line does).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context};
use puffer_store::Value;
use serde_json::json;

use super::measure::{Answer, Engine, Sizes};
use super::records::{Condition, RecordQuery, RecordTable};

/// The `rg` program on PATH, checked to run.
pub(super) fn find_ripgrep() -> anyhow::Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let program = std::env::split_paths(&path)
        .map(|dir| dir.join("rg"))
        .find(|candidate| candidate.is_file())
        .context("rg not found; run scripts/install-peers.sh")?;
    let output = Command::new(&program)
        .arg("--version")
        .output()
        .with_context(|| format!("running {}", program.display()))?;
    if !output.status.success() {
        bail!("{} --version failed", program.display());
    }
    Ok(program)
}

/// The version line of `rg --version`.
fn version(program: &Path) -> String {
    Command::new(program)
        .arg("--version")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .to_string()
        })
        .unwrap_or_default()
}

/// How many lines of `file` contain `pattern`.
fn count_lines(program: &Path, pattern: &[u8], file: &Path) -> anyhow::Result<u64> {
    let output = Command::new(program)
        .args(["-F", "-c", "-j1", "-a", "--no-config", "-e"])
        .arg(OsStr::from_bytes(pattern))
        .arg(file)
        .output()
        .with_context(|| format!("running {}", program.display()))?;
    match output.status.code() {
        Some(0) => Ok(String::from_utf8_lossy(&output.stdout).trim().parse()?),
        // 1: no line matched.
        Some(1) => Ok(0),
        _ => bail!(
            "rg failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ),
    }
}

fn sizes(program: &Path, files: &[&Path]) -> anyhow::Result<Sizes> {
    let mut disk_bytes = 0;
    for file in files {
        disk_bytes += std::fs::metadata(file)
            .with_context(|| format!("reading {}", file.display()))?
            .len();
    }
    Ok(Sizes {
        disk_bytes,
        memory_bytes: 0,
        memory_note:
            "nothing resident: each query reads the plain file (through the OS page cache)".into(),
        details: json!({ "version": version(program) }),
    })
}

// ---------------------------------------------------------------------------------
// Text corpus.

pub(super) struct RipgrepText {
    program: PathBuf,
    file: PathBuf,
}

/// ripgrep over the prepared corpus in `file`.
pub(super) fn text(program: PathBuf, file: PathBuf) -> RipgrepText {
    RipgrepText { program, file }
}

impl Engine<Vec<u8>> for RipgrepText {
    fn answer(&mut self, pattern: &Vec<u8>) -> anyhow::Result<Answer> {
        Ok(Answer::Count(count_lines(
            &self.program,
            pattern,
            &self.file,
        )?))
    }

    fn sizes(&mut self) -> anyhow::Result<Sizes> {
        sizes(&self.program, &[&self.file])
    }
}

// ---------------------------------------------------------------------------------
// Records.

pub(super) struct RipgrepRecords {
    program: PathBuf,
    files: HashMap<usize, PathBuf>,
    newline_stand_in: u8,
}

/// Writes one file per contains attribute into `work_dir`; returns the engine and the
/// seconds the files took to write.
pub(super) fn records(
    program: PathBuf,
    table: &RecordTable,
    work_dir: &Path,
) -> anyhow::Result<(RipgrepRecords, f64)> {
    let started = Instant::now();
    let values = || {
        table.contains_columns.iter().flat_map(move |&column| {
            (0..table.table.rows.len()).filter_map(move |row| match table.value(row, column) {
                Some(Value::String(text)) => Some(&text[..]),
                _ => None,
            })
        })
    };
    let newline_stand_in = newline_stand_in(values())
        .context("every control byte occurs in the values; none can stand for line breaks")?;
    let mut files = HashMap::new();
    for &column in &table.contains_columns {
        let path = work_dir.join(format!("column-{column}.txt"));
        let file =
            std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        let mut out = std::io::BufWriter::new(file);
        for row in 0..table.table.rows.len() {
            if let Some(Value::String(text)) = table.value(row, column) {
                out.write_all(&replace_newlines(text, newline_stand_in))?;
            }
            out.write_all(b"\n")?;
        }
        out.flush()?;
        files.insert(column, path);
    }
    let engine = RipgrepRecords {
        program,
        files,
        newline_stand_in,
    };
    Ok((engine, started.elapsed().as_secs_f64()))
}

/// The first control byte other than `\n` that no value holds.
fn newline_stand_in<'v>(values: impl Iterator<Item = &'v [u8]>) -> Option<u8> {
    let mut seen = [false; 32];
    for value in values {
        for &byte in value {
            if byte < 32 {
                seen[byte as usize] = true;
            }
        }
    }
    (1u8..32).find(|&byte| byte != b'\n' && !seen[byte as usize])
}

fn replace_newlines(text: &[u8], stand_in: u8) -> Vec<u8> {
    text.iter()
        .map(|&b| if b == b'\n' { stand_in } else { b })
        .collect()
}

impl Engine<RecordQuery> for RipgrepRecords {
    fn supports(&self, query: &RecordQuery) -> bool {
        // It counts lines; a LIMIT has no meaning there.
        matches!(query.condition, Condition::Contains(_))
            && query.limit.is_none()
            && self.files.contains_key(&query.column)
    }

    fn answer(&mut self, query: &RecordQuery) -> anyhow::Result<Answer> {
        let (Condition::Contains(needle), Some(file)) =
            (&query.condition, self.files.get(&query.column))
        else {
            bail!("ripgrep answers substring queries on the contains attributes only");
        };
        Ok(Answer::Count(count_lines(
            &self.program,
            &replace_newlines(needle, self.newline_stand_in),
            file,
        )?))
    }

    fn sizes(&mut self) -> anyhow::Result<Sizes> {
        let files: Vec<&Path> = self.files.values().map(PathBuf::as_path).collect();
        sizes(&self.program, &files)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stand_in_is_a_byte_no_value_holds() {
        let values: [&[u8]; 2] = [b"a\x01b\nc", b"\x02\x03"];
        assert_eq!(newline_stand_in(values.into_iter()), Some(4));
        let all: Vec<u8> = (0u8..32).collect();
        assert_eq!(newline_stand_in(std::iter::once(&all[..])), None);
        // A value contains a pattern exactly when the rewritten value contains the
        // rewritten pattern, as the stand-in occurs in neither.
        let value = b"line one\nline two";
        for pattern in [&b"one\nline"[..], b"e\nl", b"one", b"\n\n"] {
            let contains = |text: &[u8], p: &[u8]| text.windows(p.len()).any(|w| w == p);
            assert_eq!(
                contains(&replace_newlines(value, 4), &replace_newlines(pattern, 4)),
                contains(value, pattern)
            );
        }
    }
}
