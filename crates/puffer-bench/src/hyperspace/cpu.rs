//! CPU time of this process's threads, by what they do (Linux `/proc`): what the
//! shards' background threads (sealing log tables, compacting) take from the clients
//! while a run goes on. The model charges an update for its copies; a region being
//! written also seals and compacts about once a second, whatever the rate it is
//! written at, and these figures show how much of the machine that takes.

use std::collections::BTreeMap;

/// Clock ticks a second in `/proc/<pid>/task/<tid>/stat` (`USER_HZ`, 100 on every
/// Linux architecture the project builds on).
const TICKS_PER_S: f64 = 100.0;

/// Most threads read in one sample: a configuration of a few subspaces runs a few
/// hundred; beyond this the sample is refused rather than read for seconds.
const MAX_THREADS: usize = 20_000;

/// CPU seconds the calling thread has run (`CLOCK_THREAD_CPUTIME_ID`, nanoseconds
/// apart); 0 where the clock cannot be read. What an operation took of the machine on
/// its client's thread, queueing for the cores left out (the work its regions hand to
/// their replicas' workers is on their threads, not here).
pub fn this_thread_s() -> f64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec, written by the call and read after it.
    let answered = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    if answered != 0 {
        return 0.0;
    }
    now.tv_sec as f64 + now.tv_nsec as f64 * 1e-9
}

/// CPU seconds of the process's live threads, summed by thread name, and of the whole
/// process (threads that ended included: the clients of a run end with it).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ThreadCpu {
    pub seconds_by_name: BTreeMap<String, f64>,
    pub process_s: f64,
}

impl ThreadCpu {
    /// The process's threads now; `None` where `/proc` cannot be read (not Linux).
    pub fn sample() -> Option<ThreadCpu> {
        let mut seconds_by_name = BTreeMap::new();
        for (n, entry) in std::fs::read_dir("/proc/self/task").ok()?.enumerate() {
            if n >= MAX_THREADS {
                return None;
            }
            let Ok(entry) = entry else { continue };
            // A thread that ended since the listing has no file: skipped.
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            if let Some((name, seconds)) = parse_stat(&stat) {
                *seconds_by_name.entry(name).or_insert(0.0) += seconds;
            }
        }
        let (_, process_s) = parse_stat(&std::fs::read_to_string("/proc/self/stat").ok()?)?;
        Some(ThreadCpu {
            seconds_by_name,
            process_s,
        })
    }

    /// CPU seconds each kind of thread spent from `earlier` to `self` (threads that
    /// ended in between are not counted; the shards' threads live as long as their
    /// configuration).
    pub fn since(&self, earlier: &ThreadCpu) -> ThreadCpu {
        let seconds_by_name = self
            .seconds_by_name
            .iter()
            .map(|(name, &now)| {
                let before = earlier.seconds_by_name.get(name).copied().unwrap_or(0.0);
                (name.clone(), (now - before).max(0.0))
            })
            .collect();
        ThreadCpu {
            seconds_by_name,
            process_s: (self.process_s - earlier.process_s).max(0.0),
        }
    }

    /// Seconds of threads whose name starts with `prefix`.
    pub fn seconds_of(&self, prefix: &str) -> f64 {
        self.seconds_by_name
            .iter()
            .filter(|(name, _)| name.starts_with(prefix))
            .map(|(_, s)| s)
            .sum()
    }
}

/// CPU seconds a second of a run that threads of each kind spent (of up to as many as
/// the machine has cores).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuRates {
    /// Shards' threads sealing log tables into sorted batches.
    pub seal: f64,
    /// Shards' threads compacting sorted batches into segments.
    pub compact: f64,
    /// Commit threads (the shards' and the database's).
    pub commit: f64,
    /// The whole process (the clients' threads and the cluster's nodes included).
    pub all: f64,
}

impl CpuRates {
    /// The rates of `spent` over `seconds` of wall time (> 0).
    pub fn of(spent: &ThreadCpu, seconds: f64) -> CpuRates {
        let per_s = |cpu_s: f64| cpu_s / seconds.max(f64::MIN_POSITIVE);
        CpuRates {
            seal: per_s(spent.seconds_of("puffer-seal")),
            compact: per_s(spent.seconds_of("puffer-compact")),
            // Linux keeps 15 bytes of a name: "puffer-db-commit" reads "puffer-db-commi".
            commit: per_s(spent.seconds_of("puffer-commit") + spent.seconds_of("puffer-db-comm")),
            all: per_s(spent.process_s),
        }
    }

    /// Sealing and compacting: the shards' background work.
    pub fn background(&self) -> f64 {
        self.seal + self.compact
    }
}

impl std::fmt::Display for CpuRates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "threads' CPU (s/s): seal {:.3}, compact {:.3}, commit {:.3}, all {:.3}",
            self.seal, self.compact, self.commit, self.all
        )
    }
}

/// A thread's name and CPU seconds (user and system) from its `stat` line:
/// `tid (name) state ...`, the times its 14th and 15th fields. The name may hold
/// spaces and parentheses, so the fields are counted from the last `)`.
fn parse_stat(stat: &str) -> Option<(String, f64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = stat.get(open + 1..close)?.to_string();
    let fields: Vec<&str> = stat.get(close + 1..)?.split_whitespace().collect();
    // fields[0] is the state (field 3): utime is field 14, stime 15.
    let user: f64 = fields.get(11)?.parse().ok()?;
    let system: f64 = fields.get(12)?.parse().ok()?;
    Some((name, (user + system) / TICKS_PER_S))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_threads_clock_counts_its_own_work_only() {
        let before = this_thread_s();
        // Another thread spinning adds nothing to this one's clock...
        let other = std::thread::spawn(|| {
            let started = this_thread_s();
            let mut x = 0u64;
            while this_thread_s() - started < 0.05 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            this_thread_s() - started
        });
        let spun = other.join().unwrap();
        let idle = this_thread_s() - before;
        assert!(spun >= 0.05, "{spun}");
        assert!(idle < spun, "idle {idle} s against {spun} s spun elsewhere");
        // ...and its own does.
        let started = this_thread_s();
        let mut x = 0u64;
        while this_thread_s() - started < 0.02 {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        assert!(this_thread_s() - before >= 0.02);
    }

    #[test]
    fn stat_lines_are_read_from_the_last_parenthesis() {
        let line = "4242 (puffer-seal) S 1 1 1 0 -1 4194368 12 0 0 0 250 50 0 0 20 0 1 0 5 0 0";
        assert_eq!(parse_stat(line), Some(("puffer-seal".to_string(), 3.0)));
        // A name holding ") " and spaces.
        let line = "7 (a) b c) R 1 1 1 0 -1 0 0 0 0 0 7 3 0 0 20 0 1 0 5 0 0";
        assert_eq!(parse_stat(line), Some(("a) b c".to_string(), 0.1)));
        assert_eq!(parse_stat("7 (short) R 1 2"), None);
        assert_eq!(parse_stat("no parenthesis"), None);
    }

    #[test]
    fn a_busy_thread_is_seen_under_its_name() {
        let Some(before) = ThreadCpu::sample() else {
            eprintln!("*** SKIPPED: /proc/self/task cannot be read here (not Linux) ***");
            return;
        };
        // Spins until its own CPU seconds show (the clock counts 10 ms ticks; on a
        // loaded machine that takes longer than its wall time), at most 20 s.
        let worker = std::thread::Builder::new()
            .name("cpu-test-spin".into())
            .spawn(move || {
                let started = std::time::Instant::now();
                let mut x = 0u64;
                while started.elapsed().as_secs() < 20 {
                    for _ in 0..1_000_000 {
                        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    }
                    std::hint::black_box(x);
                    let now = ThreadCpu::sample().expect("sampled before");
                    if now.since(&before).seconds_of("cpu-test-spin") >= 0.05 {
                        return Some((before, now));
                    }
                }
                None
            })
            .unwrap();
        let (before, after) = worker
            .join()
            .unwrap()
            .expect("20 s of spinning never showed as the thread's CPU time");
        let spent = after.since(&before);
        let threads_s: f64 = spent.seconds_by_name.values().sum();
        assert!(threads_s >= spent.seconds_of("cpu-test-spin"));
        assert!(spent.process_s + 0.02 >= spent.seconds_of("cpu-test-spin"));
        assert_eq!(spent.seconds_of("no-such-thread"), 0.0);
    }

    #[test]
    fn rates_sort_threads_by_kind() {
        let spent = ThreadCpu {
            seconds_by_name: BTreeMap::from([
                ("puffer-seal".to_string(), 1.0),
                ("puffer-compact".to_string(), 2.0),
                ("puffer-commit".to_string(), 0.5),
                ("puffer-db-commi".to_string(), 0.25),
                ("puffer-bench".to_string(), 4.25),
            ]),
            process_s: 8.0,
        };
        let rates = CpuRates::of(&spent, 2.0);
        assert_eq!(
            rates,
            CpuRates {
                seal: 0.5,
                compact: 1.0,
                commit: 0.375,
                all: 4.0
            }
        );
        assert_eq!(rates.background(), 1.5);
    }
}
