//! Helpers shared by the tests that start `puffer serve` as a child process.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::Duration;

use tempfile::TempDir;

/// Environment variables the server reads; removed so the caller's environment cannot
/// change what a test sees.
const SERVER_VARS: &[&str] = &[
    "PUFFER_DATA",
    "PUFFER_LISTEN",
    "PUFFER_READ_TOKEN",
    "PUFFER_WRITE_TOKEN",
    "PUFFER_ADMIN_TOKEN",
    "PUFFER_MAX_BODY_BYTES",
    "PUFFER_MAX_BATCH_RECORDS",
    "PUFFER_MAX_RESULT_ROWS",
    "PUFFER_MAX_CONCURRENT_REQUESTS",
    "PUFFER_RECORD_CACHE_MB",
    "PUFFER_LOG_TABLE_MAX_RECORDS",
    "PUFFER_MAX_CONNECTIONS",
    "PUFFER_HEADER_TIMEOUT_S",
    "PUFFER_BODY_TIMEOUT_S",
    "PUFFER_IDLE_TIMEOUT_S",
];

/// A running `puffer serve` on a data directory, listening on a free local port; killed
/// when dropped (also while a failing test unwinds, when its stderr is printed).
pub struct ServeProcess {
    child: Child,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    stderr: Arc<Mutex<String>>,
    /// The temporary data directory it owns, if any (`None` once handed back by
    /// [`ServeProcess::stop`]).
    data: Option<TempDir>,
}

impl ServeProcess {
    /// Starts `puffer serve` on `data` with extra arguments and environment variables,
    /// and waits for the address it prints.
    pub fn start(data: TempDir, extra_args: &[&str], env: &[(&str, &str)]) -> ServeProcess {
        let mut server = ServeProcess::start_on(data.path(), extra_args, env);
        server.data = Some(data);
        server
    }

    /// Starts `puffer serve` on a data directory the caller keeps.
    pub fn start_on(data: &Path, extra_args: &[&str], env: &[(&str, &str)]) -> ServeProcess {
        ServeProcess::start_listening(data, "127.0.0.1:0", extra_args, env)
    }

    /// Starts `puffer serve` on `listen` (a cluster node needs a fixed port).
    pub fn start_listening(
        data: &Path,
        listen: &str,
        extra_args: &[&str],
        env: &[(&str, &str)],
    ) -> ServeProcess {
        let mut command = Command::new(env!("CARGO_BIN_EXE_puffer"));
        command
            .arg("serve")
            .args(extra_args)
            .args(["--listen", listen, "--data"])
            .arg(data)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for var in SERVER_VARS {
            command.env_remove(var);
        }
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("cannot start puffer serve");
        let stderr = collect(child.stderr.take().expect("piped stderr"));
        let first_line = first_line(child.stdout.take().expect("piped stdout"));
        let mut server = ServeProcess {
            child,
            base: String::new(),
            stderr,
            data: None,
        };
        let line = match first_line.recv_timeout(Duration::from_secs(60)) {
            Ok(Some(line)) => line,
            other => panic!(
                "puffer serve printed no address ({other:?}); stderr:\n{}",
                server.stderr()
            ),
        };
        server.base = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        assert!(server.base.starts_with("http://127.0.0.1:"), "{line}");
        server
    }

    /// What the server wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().expect("stderr lock").clone()
    }

    /// Kills the server with SIGKILL now (callers that share it with other threads;
    /// a system call, so no `kill` program is needed).
    pub fn kill(&self) {
        let pid = libc::pid_t::try_from(self.child.id()).expect("a pid fits pid_t");
        // SAFETY: a plain system call on our own child's pid, no pointers involved.
        let result = unsafe { libc::kill(pid, libc::SIGKILL) };
        assert_eq!(
            result,
            0,
            "kill failed: {}",
            std::io::Error::last_os_error()
        );
    }

    /// The server's peak resident set size so far (`VmHWM`), in bytes.
    pub fn peak_rss_bytes(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("the server's /proc status");
        status_kib(&status, "VmHWM:").expect("VmHWM in /proc status") * 1024
    }

    /// `host:port` of the server.
    pub fn authority(&self) -> &str {
        self.base.trim_start_matches("http://")
    }

    /// Stops the server and hands back the data directory it was started with.
    pub fn stop(mut self) -> TempDir {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.data.take().expect("the data directory is still held")
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if thread::panicking() {
            eprintln!("--- puffer serve stderr ---\n{}", self.stderr());
        }
    }
}

/// Reads a pipe to its end on a thread, keeping the text.
pub fn collect(pipe: impl Read + Send + 'static) -> Arc<Mutex<String>> {
    let text = Arc::new(Mutex::new(String::new()));
    let sink = text.clone();
    thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            let mut sink = sink.lock().expect("stderr lock");
            sink.push_str(&line);
            sink.push('\n');
        }
    });
    text
}

/// Sends the pipe's first line (None at its end), then keeps draining it.
pub fn first_line(pipe: impl Read + Send + 'static) -> mpsc::Receiver<Option<String>> {
    let (sender, receiver) = mpsc::channel();
    thread::spawn(move || {
        let mut lines = BufReader::new(pipe).lines().map_while(Result::ok);
        let _ = sender.send(lines.next());
        lines.for_each(drop);
    });
    receiver
}

// ---------------------------------------------------------------------------------------
// Oracles of the text queries (naive scans)
// ---------------------------------------------------------------------------------------

/// Every offset where `pattern` occurs in `text`, ascending.
pub fn naive_occurrences(text: &[u8], pattern: &[u8]) -> Vec<u64> {
    if pattern.is_empty() || pattern.len() > text.len() {
        return Vec::new();
    }
    text.windows(pattern.len())
        .enumerate()
        .filter(|(_, window)| *window == pattern)
        .map(|(offset, _)| offset as u64)
        .collect()
}

/// Every offset `j` whose suffix is `>= lo` and whose first `hi.len()` bytes (or fewer,
/// at the end) are `<= hi`, ascending: a scan of every suffix.
pub fn naive_range(text: &[u8], lo: &[u8], hi: &[u8]) -> Vec<u64> {
    (0..text.len())
        .filter(|&j| {
            let suffix = &text[j..];
            suffix >= lo && &suffix[..hi.len().min(suffix.len())] <= hi
        })
        .map(|j| j as u64)
        .collect()
}

/// Every (start, len) where `prefix` occurs at `start` and `suffix` at `s`, `s` at or
/// after the prefix's end and at most `max_gap` bytes after it, `len` running to the
/// suffix's end; ascending by start, then len.
pub fn naive_wildcard(text: &[u8], prefix: &[u8], suffix: &[u8], max_gap: u64) -> Vec<(u64, u64)> {
    let mut matches = Vec::new();
    for p in naive_occurrences(text, prefix) {
        let earliest = p + prefix.len() as u64;
        for s in naive_occurrences(text, suffix) {
            if s >= earliest && s - earliest <= max_gap {
                matches.push((p, s + suffix.len() as u64 - p));
            }
        }
    }
    matches.sort_unstable();
    matches
}

/// Bounds of range queries over the tests' generated texts: hits, misses, crossed
/// bounds (lo > hi), empty bounds, bounds that are prefixes of each other, bounds across
/// the separators.
pub const TEXT_RANGES: &[(&str, &str)] = &[
    ("a", "b"),
    ("ban", "bandana"),
    ("bandana", "ban"),
    ("fish", "puffer"),
    ("sea", "sea"),
    ("sea salt", "sea"),
    ("", "a"),
    ("s", ""),
    ("", ""),
    ("zzz", "zzzz"),
    ("z", "a"),
    (" a", " b"),
    ("\n", "\n"),
    ("-", "-z"),
];

/// Prefix, suffix and gap of wildcard queries over the tests' generated texts.
pub const TEXT_WILDCARDS: &[(&str, &str, u64)] = &[
    ("puffer", "fish", 0),
    ("puffer", "fish", 1),
    ("ban", "ana", 0),
    ("ban", "ana", 2),
    ("an", "a", 3),
    ("sea", "reef", 40),
    ("coral", "\n", 20),
    ("a", "a", 0),
    ("zzz", "a", 10),
    ("reef", "zzz", 10),
];

// ---------------------------------------------------------------------------------------
// Memory of a child process
// ---------------------------------------------------------------------------------------

/// Runs `command` to its end, sampling its peak resident set size (`VmHWM` in
/// `/proc/<pid>/status`, which only grows) every 20 ms; returns its output and the
/// largest peak seen, in bytes (a peak in its last 20 ms may be missed).
pub fn output_and_peak_rss_bytes(command: &mut Command) -> (std::process::Output, u64) {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot start the child");
    let stdout = read_all(child.stdout.take().expect("piped stdout"));
    let stderr = read_all(child.stderr.take().expect("piped stderr"));
    let status_path = format!("/proc/{}/status", child.id());
    let mut peak_bytes = 0;
    let status = loop {
        if let Some(kib) = std::fs::read_to_string(&status_path)
            .ok()
            .and_then(|status| status_kib(&status, "VmHWM:"))
        {
            peak_bytes = peak_bytes.max(kib * 1024);
        }
        if let Some(status) = child.try_wait().expect("waiting for the child") {
            break status;
        }
        thread::sleep(Duration::from_millis(20));
    };
    let output = std::process::Output {
        status,
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
    };
    (output, peak_bytes)
}

/// A `Name:   1234 kB` line of a /proc status file, in KiB.
fn status_kib(status: &str, name: &str) -> Option<u64> {
    let line = status.lines().find(|line| line.starts_with(name))?;
    line[name.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// Reads a pipe to its end on a thread.
fn read_all(mut pipe: impl Read + Send + 'static) -> thread::JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        bytes
    })
}

/// Deterministic xorshift64 generator (tests' randomness, the same every run).
pub struct XorShift(pub u64);

impl XorShift {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A number in 0..n (0 when n is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// 0..n in a random order.
    pub fn permutation(&mut self, n: usize) -> Vec<usize> {
        let mut items: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            items.swap(i, self.below(i as u64 + 1) as usize);
        }
        items
    }
}

/// A count a long run sets in environment variable `name` (a campaign's kills), or
/// `default` (CI's size) when it is unset or not a number.
pub fn count_from_env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(default)
}
