//! Crash test: a child process ingests SCUs and prints each acknowledgement; the parent
//! kills it with SIGKILL at random moments, reopens the shard, and checks that every
//! acknowledged SCU is present, that the SCUs present are a prefix (1..=m), and that
//! none is partly applied.
//!
//! SCU `i` puts `i/0`, `i/1`, `i/2` (attribute `scu` = i) and deletes `(i-3)/2`. So SCU i is
//! applied iff `i/0` exists; then `i/1` must exist too, and `i/2` must exist iff SCU i+3 is
//! not applied. Runs without the test harness: `crash child DIR` is the child.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use puffer_store::{
    AttrType, Attribute, Predicate, Query, ReadOptions, Record, Schema, Shard, ShardOptions, Value,
    WriteOp,
};

fn schema() -> Schema {
    Schema::new(
        "key",
        vec![Attribute {
            name: "scu".into(),
            attr_type: AttrType::Int,
        }],
    )
    .unwrap()
}

fn options(background: bool) -> ShardOptions {
    ShardOptions {
        log_table_max_records: 150,
        seal_interval: Duration::from_millis(50),
        background,
        ..ShardOptions::default()
    }
}

fn key(scu: u64, part: u64) -> Vec<u8> {
    format!("{scu}/{part}").into_bytes()
}

fn child(dir: &str) {
    let shard = Shard::open(dir, schema(), options(true)).expect("child opens the shard");
    let mut next = shard.watermarks().published + 1;
    loop {
        let mut ops: Vec<WriteOp> = (0..3)
            .map(|part| {
                WriteOp::Put(Record::new(key(next, part)).with("scu", Value::Int(next as i64)))
            })
            .collect();
        if next > 3 {
            ops.push(WriteOp::Delete(key(next - 3, 2)));
        }
        match shard.write(ops) {
            Ok(seq) => {
                assert_eq!(seq, next, "the child is the only writer");
                println!("ack {seq}");
                next += 1;
            }
            Err(puffer_store::StoreError::Overloaded(_)) => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("child write failed: {e}"),
        }
    }
}

/// Checks the reopened shard; returns the number of SCUs applied.
fn verify(dir: &std::path::Path, acked: u64) -> u64 {
    let shard = Shard::open(dir, schema(), options(false)).expect("reopen after the crash");
    let rows = shard
        .search(&Query {
            predicate: Predicate::All,
            projection: None,
            limit: None,
            read: ReadOptions::default(),
        })
        .expect("scan")
        .rows;
    let present: std::collections::HashSet<Vec<u8>> = rows.iter().map(|r| r.key.clone()).collect();
    let applied = (1..).take_while(|&i| present.contains(&key(i, 0))).count() as u64;
    assert!(
        applied >= acked,
        "acknowledged SCU {acked} lost (only {applied} applied)"
    );
    assert_eq!(
        shard.watermarks().published,
        applied,
        "SCUs beyond the prefix"
    );
    for i in 1..=applied {
        assert!(present.contains(&key(i, 1)), "SCU {i} partly applied");
        let deleted_later = i + 3 <= applied;
        assert_eq!(
            present.contains(&key(i, 2)),
            !deleted_later,
            "SCU {} partly applied",
            i + 3
        );
    }
    assert!(
        !present.contains(&key(applied + 1, 1)),
        "SCU {} partly applied",
        applied + 1
    );
    assert_eq!(
        rows.len() as u64,
        2 * applied + applied.min(3),
        "unexpected records"
    );
    for row in &rows {
        let scu: u64 = std::str::from_utf8(&row.key)
            .unwrap()
            .split('/')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(
            row.values.get("scu"),
            Some(&Value::Int(scu as i64)),
            "record content"
        );
    }
    applied
}

fn parent() {
    let kills: u64 = std::env::var("PUFFER_CRASH_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    let mut acked = 0;
    let started = Instant::now();
    for round in 0..kills {
        let mut child = Command::new(&exe)
            .arg("child")
            .arg(dir.path())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn the child");
        let stdout = child.stdout.take().unwrap();
        let (sender, receiver) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(seq) = line.strip_prefix("ack ") {
                    let _ = sender.send(seq.parse::<u64>().unwrap());
                }
            }
        });
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let wait = Duration::from_millis(30 + rng % 300);
        std::thread::sleep(wait);
        child.kill().expect("SIGKILL the child");
        child.wait().unwrap();
        reader.join().unwrap();
        acked = acked.max(receiver.try_iter().max().unwrap_or(0));
        let applied = verify(dir.path(), acked);
        println!("round {round}: killed after {wait:?}; {acked} acknowledged, {applied} applied");
        acked = applied;
    }
    assert!(acked > kills, "the child made progress ({acked} SCUs)");
    println!(
        "crash test: {kills} kills, {acked} SCUs, {:?}",
        started.elapsed()
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("child") {
        child(&args[2]);
    } else if args.iter().any(|a| a == "--list") {
        println!("crash: test");
    } else {
        parent();
    }
}
