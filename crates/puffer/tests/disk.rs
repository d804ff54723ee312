//! The real `puffer serve` on a full disk, and with its files removed or cut under it.
//!
//! The full disk is a small tmpfs mounted by the test (root is needed: without it the test
//! says so loudly and skips, or fails under `PUFFER_REQUIRE_SERVICES=1`, as in CI).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{ServeProcess, XorShift};
use serde_json::{json, Value};

/// A tmpfs mounted for one test, unmounted when dropped.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    /// Mounts a tmpfs of `mib` MiB, or explains why not (`None`).
    fn mount(mib: u64) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().expect("temp dir");
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir.path())
            .stderr(Stdio::piped())
            .output();
        match mounted {
            Ok(output) if output.status.success() => Some(SmallDisk { dir }),
            other => {
                let why = match other {
                    Ok(output) => String::from_utf8_lossy(&output.stderr).trim().to_string(),
                    Err(e) => e.to_string(),
                };
                assert!(
                    std::env::var("PUFFER_REQUIRE_SERVICES").as_deref() != Ok("1"),
                    "cannot mount a small tmpfs for the full-disk test ({why}), and \
                     PUFFER_REQUIRE_SERVICES=1 forbids skipping it"
                );
                eprintln!(
                    "\n*** SKIPPED: the full-disk test needs to mount a tmpfs (root): {why} ***\n"
                );
                None
            }
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// One HTTP answer: status, body as JSON, and whether it carried `Retry-After`.
fn send(request: ureq::Request, body: Option<&Value>) -> (u16, Value, bool) {
    let result = match body {
        Some(body) => request.send_json(body),
        None => request.call(),
    };
    let response = match result {
        Ok(response) | Err(ureq::Error::Status(_, response)) => response,
        Err(e) => panic!("no answer: {e}"),
    };
    let status = response.status();
    let retry_after = response.header("retry-after").is_some();
    let body = response.into_json().unwrap_or(Value::Null);
    (status, body, retry_after)
}

fn sql(server: &ServeProcess, query: &str) -> (u16, Value, bool) {
    send(
        ureq::post(&format!("{}/v1/sql", server.base)),
        Some(&json!({ "query": query })),
    )
}

fn count(server: &ServeProcess) -> u64 {
    let (status, body, _) = sql(server, "SELECT COUNT(*) FROM t");
    assert_eq!(status, 200, "count: {body}");
    body["count"].as_u64().expect("a count")
}

/// Checks every key of `model` (up to `limit` of them, spread) against the server.
fn check_gets(server: &ServeProcess, model: &BTreeMap<String, String>, limit: usize) {
    let step = (model.len() / limit.max(1)).max(1);
    for (key, body) in model.iter().step_by(step) {
        let (status, answer, _) = send(
            ureq::get(&format!("{}/v1/tables/t/records/{key}", server.base)),
            None,
        );
        assert_eq!(status, 200, "get {key}: {answer}");
        assert_eq!(answer["record"]["body"], json!(body), "get {key}");
    }
}

/// Random records of about 300 bytes.
fn batch(rng: &mut XorShift, first: usize, records: usize) -> Vec<(String, String)> {
    (first..first + records)
        .map(|i| {
            let body: String = (0..300)
                .map(|_| (b'a' + rng.below(26) as u8) as char)
                .collect();
            (format!("k{i:07}"), body)
        })
        .collect()
}

/// Puts `records` as one batch, asking again while the server answers 429 `overloaded`
/// (compaction behind the writes), for up to a minute.
fn put(server: &ServeProcess, records: &[(String, String)]) -> (u16, Value, bool) {
    let body: Vec<Value> = records
        .iter()
        .map(|(id, body)| json!({"id": id, "body": body}))
        .collect();
    let body = Value::Array(body);
    for _ in 0..600 {
        let answer = send(
            ureq::post(&format!("{}/v1/tables/t/records", server.base)),
            Some(&body),
        );
        if answer.0 != 429 {
            return answer;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("overloaded for a minute");
}

#[test]
fn a_full_disk_refuses_writes_retryably_keeps_reads_and_resumes_when_space_is_freed() {
    let Some(disk) = SmallDisk::mount(12) else {
        return;
    };
    // Ballast, to free later.
    let ballast = disk.path().join("ballast");
    std::fs::write(&ballast, vec![7u8; 3 << 20]).expect("ballast");
    let data = disk.path().join("data");
    let server = ServeProcess::start_on(&data, &[], &[("PUFFER_LOG_TABLE_MAX_RECORDS", "500")]);
    let (status, body, _) = sql(&server, "CREATE TABLE t (id TEXT PRIMARY KEY, body TEXT)");
    assert_eq!(status, 200, "{body}");

    let mut rng = XorShift(11);
    let mut model = BTreeMap::new();
    let mut next = 0;
    // Every free byte taken at once, so the log's own append fails: it is taken back and
    // refused, and the server goes on.
    let filler = disk.path().join("filler");
    {
        use std::io::Write;
        let mut file = std::fs::File::create(&filler).expect("filler");
        while file.write_all(&[1u8; 4096]).is_ok() {}
        let _ = file.write_all(&[1u8; 1]);
    }
    let mut log_refusals = 0;
    for _ in 0..5 {
        let records = batch(&mut rng, next, 50);
        next += 50;
        let (status, body, _) = put(&server, &records);
        assert_eq!(status, 507, "a write on a full disk: {body}");
        assert_eq!(body["code"], "disk_full", "{body}");
        if body["message"]
            .as_str()
            .unwrap_or_default()
            .contains(".wal")
        {
            log_refusals += 1;
        }
    }
    assert!(
        log_refusals > 0,
        "no write reached the log while the disk was full"
    );
    std::fs::remove_file(&filler).expect("remove the filler");
    let records = batch(&mut rng, next, 50);
    next += 50;
    let (status, body, _) = put(&server, &records);
    assert_eq!(status, 200, "a write once the filler is gone: {body}");
    model.extend(records);
    let mut refusals = 0;
    // Fill the disk: every batch is acknowledged whole or refused `disk_full`.
    while refusals < 20 {
        assert!(next < 200_000, "the disk never filled");
        let records = batch(&mut rng, next, 50);
        next += 50;
        let (status, body, retry_after) = put(&server, &records);
        match status {
            200 => model.extend(records),
            507 => {
                assert_eq!(body["code"], "disk_full", "{body}");
                assert_eq!(body["retryable"], true, "{body}");
                assert!(retry_after, "a disk_full answer without Retry-After");
                refusals += 1;
            }
            _ => panic!("a write on a filling disk answered {status}: {body}"),
        }
    }
    // Reads go on, and see exactly what was acknowledged.
    assert_eq!(count(&server), model.len() as u64);
    check_gets(&server, &model, 50);

    // Space freed: writes resume by themselves.
    std::fs::remove_file(&ballast).expect("remove the ballast");
    let freed = Instant::now();
    let deadline = freed + Duration::from_secs(30);
    let mut resumed = false;
    while Instant::now() < deadline {
        let records = batch(&mut rng, next, 50);
        next += 50;
        let (status, body, _) = put(&server, &records);
        match status {
            200 => {
                model.extend(records);
                resumed = true;
                break;
            }
            507 => std::thread::sleep(Duration::from_millis(200)),
            _ => panic!("a write after space was freed answered {status}: {body}"),
        }
    }
    assert!(
        resumed,
        "writes did not resume within 30 s of freeing space"
    );
    eprintln!(
        "full disk: {log_refusals} of 5 batches refused disk_full by the log itself, then \
         {} records acknowledged and {refusals} batches refused disk_full as compaction could \
         not write; writes resumed {:?} after space was freed",
        model.len(),
        freed.elapsed()
    );
    assert_eq!(count(&server), model.len() as u64);

    // Nothing acknowledged is lost across a restart.
    server.kill();
    drop(server);
    let server = ServeProcess::start_on(&data, &[], &[]);
    assert_eq!(count(&server), model.len() as u64);
    check_gets(&server, &model, 200);
    drop(server);
    drop(disk);
}

/// The newest file of `dir` whose name ends with `suffix`.
fn newest(dir: &Path, suffix: &str) -> PathBuf {
    let mut files: Vec<PathBuf> = walk(dir)
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    files.sort_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok());
    files
        .pop()
        .unwrap_or_else(|| panic!("no *{suffix} under {}", dir.display()))
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
fn a_log_file_removed_or_cut_under_the_server_stops_writes_with_a_clear_error() {
    for cut in [false, true] {
        let data = tempfile::tempdir().expect("temp dir");
        let server = ServeProcess::start_on(data.path(), &[], &[]);
        let (status, body, _) = sql(&server, "CREATE TABLE t (id TEXT PRIMARY KEY, body TEXT)");
        assert_eq!(status, 200, "{body}");
        let mut rng = XorShift(5);
        let mut model = BTreeMap::new();
        for first in (0..500).step_by(50) {
            let records = batch(&mut rng, first, 50);
            let (status, body, _) = put(&server, &records);
            assert_eq!(status, 200, "{body}");
            model.extend(records);
        }
        let log = newest(&data.path().join("log"), ".wal");
        if cut {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(&log)
                .expect("open the log");
            let len = file.metadata().expect("metadata").len();
            file.set_len(len / 2).expect("cut the log");
        } else {
            std::fs::remove_file(&log).expect("remove the log");
        }
        // The next write is refused, naming the file and what happened to it...
        let (status, body, _) = put(&server, &batch(&mut rng, 1000, 10));
        assert!(
            status >= 500,
            "a write after the log was {} answered {status}: {body}",
            if cut { "cut" } else { "removed" }
        );
        let message = body["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(&log.display().to_string()) && message.contains("under the server"),
            "{message}"
        );
        // ...and so is every later one; reads answer what was acknowledged before.
        let (status, body, _) = put(&server, &batch(&mut rng, 2000, 10));
        assert!(status >= 500, "a second write answered {status}: {body}");
        assert_eq!(count(&server), model.len() as u64);
        check_gets(&server, &model, 50);
    }
}

#[test]
fn a_segment_cut_under_the_server_never_gives_a_wrong_answer_and_is_named_at_restart() {
    let data = tempfile::tempdir().expect("temp dir");
    let server = ServeProcess::start_on(
        data.path(),
        &[],
        &[
            ("PUFFER_LOG_TABLE_MAX_RECORDS", "200"),
            ("PUFFER_RECORD_CACHE_MB", "0"),
        ],
    );
    let (status, body, _) = sql(&server, "CREATE TABLE t (id TEXT PRIMARY KEY, body TEXT)");
    assert_eq!(status, 200, "{body}");
    let mut rng = XorShift(3);
    let mut model = BTreeMap::new();
    for first in (0..2000).step_by(100) {
        let records = batch(&mut rng, first, 100);
        let (status, body, _) = put(&server, &records);
        assert_eq!(status, 200, "{body}");
        model.extend(records);
    }
    // Wait until the records are in a compressed segment.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, table, _) = send(ureq::get(&format!("{}/v1/tables/t", server.base)), None);
        if table["stats"]["segment_records"].as_u64() == Some(model.len() as u64) {
            break;
        }
        assert!(Instant::now() < deadline, "never compacted: {table}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let segment = newest(data.path(), ".idx");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .expect("open the segment");
    file.set_len(64).expect("cut the segment");
    // Reads now either answer right, fail with an error, or end the server with its
    // word on why; never a wrong answer.
    let mut ended = false;
    for (key, body) in model.iter().step_by(37) {
        let result = ureq::get(&format!("{}/v1/tables/t/records/{key}", server.base)).call();
        match result {
            Ok(response) => {
                let answer: Value = response.into_json().expect("JSON");
                assert_eq!(answer["record"]["body"], json!(body), "get {key}");
            }
            Err(ureq::Error::Status(status, _)) => assert!(status >= 500, "{status}"),
            Err(_) => {
                ended = true;
                break;
            }
        }
    }
    eprintln!(
        "segment cut: the server {}",
        if ended {
            "ended with its word on why"
        } else {
            "answered every read right"
        }
    );
    if ended {
        // Give the server a moment to write its last words.
        std::thread::sleep(Duration::from_millis(200));
        let stderr = server.stderr();
        assert!(
            stderr.contains("cut under the server (SIGBUS)"),
            "the server ended without saying why: {stderr}"
        );
    }
    server.kill();
    drop(server);
    // The next start refuses, naming the file.
    let mut child = Command::new(env!("CARGO_BIN_EXE_puffer"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(data.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start puffer serve");
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the server started on a cut segment");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let output = child.wait_with_output().expect("output");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    let name = segment.file_name().expect("a name").to_string_lossy();
    assert!(stderr.contains(name.as_ref()), "{stderr}");
}
