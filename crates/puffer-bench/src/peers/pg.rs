//! PostgreSQL with `pg_trgm` GIN indexes, on a private server this harness starts.
//!
//! The server: `initdb` into a fresh temporary directory (UTF-8, C locale, trust
//! authentication for a superuser `puffer`), `pg_ctl start` on a free port of
//! 127.0.0.1 with its socket in that directory, and `pg_ctl stop` plus the directory's
//! removal when the [`PgServer`] guard is dropped, errors included. PostgreSQL refuses
//! to run as root, so as root its tools run as the `postgres` user (`runuser`), who
//! then owns the directory. Settings: `max_parallel_workers_per_gather = 0` (one core
//! per query, like every engine here), `plan_cache_mode = force_custom_plan` (each
//! LIKE is planned with its pattern), `maintenance_work_mem = 256MB` (index builds);
//! everything else is the default (`shared_buffers` 128MB).
//!
//! Text: table `t (id, line)`, a trigram GIN index on `line`. Records: table `r` of
//! every attribute, B-tree indexes on the equality and range attributes, trigram GIN
//! indexes on the contains attributes. Substrings are `LIKE '%...%'` with `\`, `%` and
//! `_` escaped. Sizes come from `pg_total_relation_size`.

use std::collections::HashMap;
use std::io::Write;
use std::ops::Bound;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context};
use postgres::types::ToSql;
use postgres::{Client, NoTls, Statement};
use puffer_store::{AttrType, Value};
use serde_json::json;

use super::corpus::{lines, Corpus};
use super::measure::{Answer, Engine, Sizes};
use super::records::{Condition, RecordQuery, RecordTable};

const SUPERUSER: &str = "puffer";
/// The unprivileged user PostgreSQL runs as when this process is root.
const SERVER_USER: &str = "postgres";
const SERVER_SETTINGS: &str =
    "-c max_parallel_workers_per_gather=0 -c plan_cache_mode=force_custom_plan -c maintenance_work_mem=256MB";
const START_TIMEOUT_SECONDS: u32 = 120;

/// A `LIKE` pattern matching text that contains `pattern` (the escape character is
/// `LIKE`'s default, the backslash).
pub(super) fn like_contains(pattern: &str) -> String {
    let mut like = String::with_capacity(pattern.len() + 2);
    like.push('%');
    for c in pattern.chars() {
        if matches!(c, '\\' | '%' | '_') {
            like.push('\\');
        }
        like.push(c);
    }
    like.push('%');
    like
}

/// `text` escaped for `COPY ... FROM STDIN` in text format.
fn push_copy_text(out: &mut Vec<u8>, text: &[u8]) {
    for &byte in text {
        match byte {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            _ => out.push(byte),
        }
    }
}

// ---------------------------------------------------------------------------------
// The server.

/// A private PostgreSQL server, stopped and deleted when dropped.
pub(super) struct PgServer {
    bin_dir: PathBuf,
    run_as: Option<&'static str>,
    port: u16,
    /// Declared last: removed after `drop` has stopped the server.
    data_dir: tempfile::TempDir,
}

impl PgServer {
    /// Creates and starts a server; the error says why it could not (the peer is then
    /// skipped).
    pub(super) fn start() -> anyhow::Result<PgServer> {
        let bin_dir = find_bin_dir()?;
        let run_as = running_as_root().then_some(SERVER_USER);
        let data_dir = tempfile::Builder::new()
            .prefix("puffer-bench-pg-")
            .tempdir()?;
        if let Some(user) = run_as {
            let (uid, gid) = user_ids(user)?;
            std::os::unix::fs::chown(data_dir.path(), Some(uid), Some(gid))
                .with_context(|| format!("giving {} to user {user}", data_dir.path().display()))?;
        }
        let path = data_dir
            .path()
            .to_str()
            .context("the temporary directory's path is not UTF-8")?
            .to_string();
        if path.contains(|c: char| c.is_whitespace() || c == '\'' || c == '"') {
            bail!("the temporary directory's path {path:?} has spaces or quotes");
        }
        let server = PgServer {
            bin_dir,
            run_as,
            port: free_port()?,
            data_dir,
        };
        server.run(
            "initdb",
            &[
                "-D",
                &path,
                "-U",
                SUPERUSER,
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ],
        )?;
        let options = format!(
            "-p {} -k {path} -c listen_addresses=127.0.0.1 {SERVER_SETTINGS}",
            server.port
        );
        let log = format!("{path}/server.log");
        let timeout = START_TIMEOUT_SECONDS.to_string();
        if let Err(e) = server.run(
            "pg_ctl",
            &[
                "-D", &path, "-l", &log, "-w", "-t", &timeout, "-o", &options, "start",
            ],
        ) {
            let log_tail = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = log_tail.lines().rev().take(5).collect();
            bail!(
                "{e:#}; server log: {}",
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            );
        }
        Ok(server)
    }

    /// A new session with the benchmark's settings.
    pub(super) fn connect(&self) -> anyhow::Result<Client> {
        let config = format!(
            "host=127.0.0.1 port={} user={SUPERUSER} dbname=postgres",
            self.port
        );
        let mut client = Client::connect(&config, NoTls)
            .context("connecting to the private PostgreSQL server")?;
        client.batch_execute(
            "SET max_parallel_workers_per_gather = 0; SET plan_cache_mode = force_custom_plan",
        )?;
        Ok(client)
    }

    /// Runs a PostgreSQL tool (as the server user if we are root), failing with its
    /// output.
    fn run(&self, tool: &str, args: &[&str]) -> anyhow::Result<()> {
        let program = self.bin_dir.join(tool);
        let mut command = match self.run_as {
            Some(user) => {
                let mut command = Command::new("runuser");
                command.args(["-u", user, "--"]).arg(&program);
                command
            }
            None => Command::new(&program),
        };
        // A server started by pg_ctl must not hold our stdout open.
        let output = command
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .with_context(|| format!("running {}", program.display()))?;
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            bail!("{tool} failed ({}): {}", output.status, stderr.trim());
        }
        Ok(())
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let path = self.data_dir.path().to_string_lossy().into_owned();
        if let Err(e) = self.run("pg_ctl", &["-D", &path, "-m", "fast", "-w", "stop"]) {
            eprintln!("postgres: stopping the private server: {e:#}");
        }
    }
}

/// Where `initdb` and `pg_ctl` are: `pg_config --bindir`, else the newest
/// `/usr/lib/postgresql/*/bin`, else `PATH`.
fn find_bin_dir() -> anyhow::Result<PathBuf> {
    let has_tools = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    if let Ok(output) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
        if output.status.success() && has_tools(&dir) {
            return Ok(dir);
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, dir)| has_tools(dir))
        .collect();
    versions.sort();
    if let Some((_, dir)) = versions.pop() {
        return Ok(dir);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .find(|dir| has_tools(dir))
        .context("PostgreSQL server not found (no initdb and pg_ctl); run scripts/install-peers.sh")
}

fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

fn user_ids(user: &str) -> anyhow::Result<(u32, u32)> {
    let id = |flag: &str| -> anyhow::Result<u32> {
        let output = Command::new("id")
            .args([flag, user])
            .output()
            .context("running id")?;
        if !output.status.success() {
            bail!("PostgreSQL refuses to run as root and there is no user {user:?} to run it as");
        }
        Ok(String::from_utf8_lossy(&output.stdout).trim().parse()?)
    };
    Ok((id("-u")?, id("-g")?))
}

fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(listener.local_addr()?.port())
}

/// Resident set size of process `pid`, in bytes (0 if unknown).
fn process_rss_bytes(pid: i32) -> u64 {
    crate::stats::status_kb_field_bytes(&format!("/proc/{pid}/status"), "VmRSS:")
}

// ---------------------------------------------------------------------------------
// Queries and sizes, shared by both workloads.

struct Session {
    client: Client,
    statements: HashMap<String, Statement>,
}

impl Session {
    fn rows(&mut self, sql: &str, parameters: &[&(dyn ToSql + Sync)]) -> anyhow::Result<Vec<u32>> {
        if !self.statements.contains_key(sql) {
            let statement = self.client.prepare(sql)?;
            self.statements.insert(sql.to_string(), statement);
        }
        let statement = &self.statements[sql];
        let found = self.client.query(statement, parameters)?;
        found
            .iter()
            .map(|row| Ok(row.try_get::<_, i32>(0)? as u32))
            .collect()
    }

    /// Sizes of `table` (one of this module's own table names).
    fn sizes(&mut self, table: &str) -> anyhow::Result<Sizes> {
        let sql = format!(
            "SELECT pg_total_relation_size('{table}'), pg_relation_size('{table}'), pg_indexes_size('{table}'),
                    pg_size_bytes(current_setting('shared_buffers')), pg_backend_pid(), version()"
        );
        let row = self.client.query_one(&sql, &[])?;
        let total: i64 = row.get(0);
        let shared_buffers: i64 = row.get(3);
        let backend_rss = process_rss_bytes(row.get(4));
        Ok(Sizes {
            disk_bytes: total as u64,
            memory_bytes: backend_rss,
            memory_note: format!(
                "RSS of the serving backend after the queries (shared_buffers pages it touched included; shared_buffers = {} MiB); the rest is read through the OS page cache",
                shared_buffers >> 20
            ),
            details: json!({
                "total_relation_bytes": total,
                "table_bytes": row.get::<_, i64>(1),
                "indexes_bytes": row.get::<_, i64>(2),
                "shared_buffers_bytes": shared_buffers,
                "backend_rss_bytes": backend_rss,
                "version": row.get::<_, String>(5),
            }),
        })
    }
}

// ---------------------------------------------------------------------------------
// Text corpus.

pub(super) struct PgText {
    session: Session,
}

/// Loads the corpus into table `t` and indexes it; returns the engine and the load
/// seconds.
pub(super) fn load_text(server: &PgServer, corpus: &Corpus) -> anyhow::Result<(PgText, f64)> {
    let mut client = server.connect()?;
    let started = Instant::now();
    client.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_trgm; CREATE TABLE t (id integer NOT NULL, line text NOT NULL)")?;
    let mut writer = client.copy_in("COPY t (id, line) FROM STDIN")?;
    let mut buffer = Vec::with_capacity(1 << 16);
    for (number, line) in lines(&corpus.text).enumerate() {
        buffer.extend_from_slice(number.to_string().as_bytes());
        buffer.push(b'\t');
        push_copy_text(&mut buffer, line);
        buffer.push(b'\n');
        if buffer.len() >= 1 << 16 {
            writer.write_all(&buffer)?;
            buffer.clear();
        }
    }
    writer.write_all(&buffer)?;
    writer.finish().context("copying the lines")?;
    client.batch_execute("CREATE INDEX t_line_trgm ON t USING gin (line gin_trgm_ops)")?;
    // VACUUM cannot run in the implicit transaction of a multi-statement batch.
    client.batch_execute("VACUUM ANALYZE t")?;
    let load_seconds = started.elapsed().as_secs_f64();
    let session = Session {
        client,
        statements: HashMap::new(),
    };
    Ok((PgText { session }, load_seconds))
}

impl Engine<Vec<u8>> for PgText {
    fn answer(&mut self, pattern: &Vec<u8>) -> anyhow::Result<Answer> {
        let like = like_contains(
            std::str::from_utf8(pattern).context("PostgreSQL is given UTF-8 text only")?,
        );
        let found = self
            .session
            .rows("SELECT id FROM t WHERE line LIKE $1", &[&like])?;
        Ok(Answer::Rows(found))
    }

    fn sizes(&mut self) -> anyhow::Result<Sizes> {
        self.session.sizes("t")
    }
}

// ---------------------------------------------------------------------------------
// Records.

pub(super) struct PgRecords {
    session: Session,
}

fn sql_type(attr_type: AttrType) -> &'static str {
    match attr_type {
        AttrType::Int | AttrType::Timestamp => "bigint",
        AttrType::Float => "double precision",
        AttrType::Bool => "boolean",
        AttrType::String => "text",
    }
}

fn push_copy_value(out: &mut Vec<u8>, value: Option<&Value>) {
    match value {
        None => out.extend_from_slice(b"\\N"),
        Some(Value::Int(x) | Value::Timestamp(x)) => {
            out.extend_from_slice(x.to_string().as_bytes())
        }
        // Display prints the shortest decimal that reads back as the same f64.
        Some(Value::Float(x)) => out.extend_from_slice(x.to_string().as_bytes()),
        Some(Value::Bool(x)) => out.push(if *x { b't' } else { b'f' }),
        Some(Value::String(bytes)) => push_copy_text(out, bytes),
    }
}

fn parameter(value: &Value) -> Box<dyn ToSql + Sync> {
    match value {
        Value::Int(x) | Value::Timestamp(x) => Box::new(*x),
        Value::Float(x) => Box::new(*x),
        Value::Bool(x) => Box::new(*x),
        Value::String(bytes) => Box::new(String::from_utf8_lossy(bytes).into_owned()),
    }
}

/// Loads the table into `r` (columns `k` for the key and `c<id>` for each attribute)
/// and indexes it; returns the engine and the load seconds.
pub(super) fn load_records(
    server: &PgServer,
    table: &RecordTable,
) -> anyhow::Result<(PgRecords, f64)> {
    let mut client = server.connect()?;
    let attributes = &table.table.schema.attributes;
    let started = Instant::now();
    let columns: Vec<String> = attributes
        .iter()
        .enumerate()
        .map(|(id, a)| format!("c{id} {}", sql_type(a.attr_type)))
        .collect();
    client.batch_execute(&format!(
        "CREATE EXTENSION IF NOT EXISTS pg_trgm; CREATE TABLE r (rid integer NOT NULL, k text NOT NULL, {})",
        columns.join(", ")
    ))?;
    let mut writer = client.copy_in("COPY r FROM STDIN")?;
    let mut buffer = Vec::with_capacity(1 << 16);
    for (number, row) in table.table.rows.iter().enumerate() {
        buffer.extend_from_slice(number.to_string().as_bytes());
        buffer.push(b'\t');
        push_copy_text(&mut buffer, &row.key);
        for value in &row.values {
            buffer.push(b'\t');
            push_copy_value(&mut buffer, value.as_ref());
        }
        buffer.push(b'\n');
        if buffer.len() >= 1 << 16 {
            writer.write_all(&buffer)?;
            buffer.clear();
        }
    }
    writer.write_all(&buffer)?;
    writer.finish().context("copying the records")?;
    let mut btree_columns = table.eq_columns.clone();
    btree_columns.extend(&table.range_columns);
    btree_columns.sort_unstable();
    btree_columns.dedup();
    for column in btree_columns {
        client.batch_execute(&format!("CREATE INDEX r_c{column} ON r (c{column})"))?;
    }
    for column in &table.contains_columns {
        client.batch_execute(&format!(
            "CREATE INDEX r_c{column}_trgm ON r USING gin (c{column} gin_trgm_ops)"
        ))?;
    }
    client.batch_execute("VACUUM ANALYZE r")?;
    let load_seconds = started.elapsed().as_secs_f64();
    let session = Session {
        client,
        statements: HashMap::new(),
    };
    Ok((PgRecords { session }, load_seconds))
}

impl Engine<RecordQuery> for PgRecords {
    fn answer(&mut self, query: &RecordQuery) -> anyhow::Result<Answer> {
        let column = query.column;
        let limited = |sql: String| match query.limit {
            Some(limit) => format!("{sql} LIMIT {limit}"),
            None => sql,
        };
        let found = match &query.condition {
            Condition::Contains(needle) => {
                let like = like_contains(
                    std::str::from_utf8(needle).context("PostgreSQL is given UTF-8 text only")?,
                );
                self.session.rows(
                    &limited(format!("SELECT rid FROM r WHERE c{column} LIKE $1")),
                    &[&like],
                )?
            }
            Condition::Eq(value) => {
                let value = parameter(value);
                self.session.rows(
                    &limited(format!("SELECT rid FROM r WHERE c{column} = $1")),
                    &[value.as_ref()],
                )?
            }
            Condition::Range(lower, upper) => {
                let mut conditions = vec![format!("c{column} IS NOT NULL")];
                let mut parameters: Vec<Box<dyn ToSql + Sync>> = Vec::new();
                for (bound, included, excluded) in [(lower, ">=", ">"), (upper, "<=", "<")] {
                    let (operator, value) = match bound {
                        Bound::Included(value) => (included, value),
                        Bound::Excluded(value) => (excluded, value),
                        Bound::Unbounded => continue,
                    };
                    parameters.push(parameter(value));
                    conditions.push(format!("c{column} {operator} ${}", parameters.len()));
                }
                let references: Vec<&(dyn ToSql + Sync)> =
                    parameters.iter().map(|p| p.as_ref()).collect();
                self.session.rows(
                    &limited(format!(
                        "SELECT rid FROM r WHERE {}",
                        conditions.join(" AND ")
                    )),
                    &references,
                )?
            }
        };
        Ok(Answer::Rows(found))
    }

    fn sizes(&mut self) -> anyhow::Result<Sizes> {
        self.session.sizes("r")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A LIKE matcher written from the SQL standard's definition (`%` any run, `_` one
    /// character, `\` makes the next character literal), as the oracle for the escaping.
    fn like_matches(text: &[char], pattern: &[char]) -> bool {
        match pattern.split_first() {
            None => text.is_empty(),
            Some(('%', rest)) => (0..=text.len()).any(|skip| like_matches(&text[skip..], rest)),
            Some(('_', rest)) => !text.is_empty() && like_matches(&text[1..], rest),
            Some(('\\', rest)) => match rest.split_first() {
                Some((c, rest)) => text.first() == Some(c) && like_matches(&text[1..], rest),
                None => false,
            },
            Some((c, rest)) => text.first() == Some(c) && like_matches(&text[1..], rest),
        }
    }

    #[test]
    fn like_patterns_match_exactly_the_texts_containing_the_pattern() {
        let texts = [
            "100% sure",
            "a_b",
            "aXb",
            "C:\\dir\\",
            "100 % sure",
            "\\%_",
            "naïve",
        ];
        let patterns = ["0%", "a_b", "\\d", "\\", "%_", "%", "_", "ï", "X"];
        for text in texts {
            let chars: Vec<char> = text.chars().collect();
            for pattern in patterns {
                let like: Vec<char> = like_contains(pattern).chars().collect();
                assert_eq!(
                    like_matches(&chars, &like),
                    text.contains(pattern),
                    "{text:?} LIKE {pattern:?}"
                );
            }
        }
    }

    #[test]
    fn copy_text_escapes_what_copy_reads_as_special() {
        let mut out = Vec::new();
        push_copy_text(&mut out, b"a\tb\\c\rd\ne");
        assert_eq!(out, b"a\\tb\\\\c\\rd\\ne");
    }
}
