//! A replica's bounded request queue and the worker threads that serve it.
//!
//! The queue is what the adaptivity runtime watches: requests wait here when they arrive
//! faster than the workers answer. It is bounded; a full queue refuses a request at once
//! with a retryable [`StoreError::Overloaded`] rather than absorbing it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use crate::error::{Result, StoreError};

type Job<R> = Box<dyn FnOnce(&R, usize) + Send>;

/// The answer to a request, with the queue length the replica had when it answered.
#[derive(Debug)]
pub struct Response<T> {
    /// What the request computed.
    pub value: T,
    /// Requests waiting in the replica's queue when this one finished.
    pub queue_length: usize,
}

/// Counters of a pool since it started; the runtime differences them every `delta`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolCounters {
    /// Requests accepted into the queue.
    pub accepted: u64,
    /// Requests refused because the queue was full.
    pub refused: u64,
    /// Requests answered.
    pub completed: u64,
    /// Nanoseconds workers spent answering.
    pub busy_nanos: u64,
}

struct Shared<R> {
    replica: R,
    name: String,
    capacity: usize,
    queue: Mutex<VecDeque<Job<R>>>,
    work_ready: Condvar,
    queue_length: AtomicUsize,
    closed: AtomicBool,
    accepted: AtomicU64,
    refused: AtomicU64,
    completed: AtomicU64,
    busy_nanos: AtomicU64,
}

/// A replica with its request queue and workers.
pub struct ReplicaPool<R: Send + Sync + 'static> {
    shared: Arc<Shared<R>>,
    workers: Mutex<Vec<JoinHandle<()>>>,
    threads: usize,
}

impl<R: Send + Sync + 'static> ReplicaPool<R> {
    /// Starts `threads` workers (at least one) serving `replica` from a queue of `capacity`.
    pub fn start(
        name: impl Into<String>,
        replica: R,
        threads: usize,
        capacity: usize,
    ) -> Result<ReplicaPool<R>> {
        let name = name.into();
        if capacity == 0 {
            return Err(StoreError::InvalidSetting(format!(
                "request queue of {name}: capacity must be at least 1"
            )));
        }
        let shared = Arc::new(Shared {
            replica,
            name,
            capacity,
            queue: Mutex::new(VecDeque::new()),
            work_ready: Condvar::new(),
            queue_length: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            accepted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            busy_nanos: AtomicU64::new(0),
        });
        let threads = threads.max(1);
        let mut workers = Vec::with_capacity(threads);
        for worker in 0..threads {
            let for_worker = shared.clone();
            let handle = std::thread::Builder::new()
                .name(format!("puffer-serve-{worker}"))
                .spawn(move || serve(&for_worker))
                .map_err(|e| {
                    StoreError::Unavailable(format!(
                        "cannot start a worker thread for {}: {e}",
                        shared.name
                    ))
                })?;
            workers.push(handle);
        }
        Ok(ReplicaPool {
            shared,
            workers: Mutex::new(workers),
            threads,
        })
    }

    /// Queues `job`; the receiver gets its response. A full queue refuses at once.
    pub fn submit<T: Send + 'static>(
        &self,
        job: impl FnOnce(&R) -> T + Send + 'static,
    ) -> Result<mpsc::Receiver<Response<T>>> {
        let (sender, receiver) = mpsc::sync_channel(1);
        self.enqueue(Box::new(move |replica, queue_length| {
            let value = job(replica);
            let _ = sender.send(Response {
                value,
                queue_length,
            });
        }))?;
        Ok(receiver)
    }

    /// Queues `job` and waits for its response.
    pub fn execute<T: Send + 'static>(
        &self,
        job: impl FnOnce(&R) -> T + Send + 'static,
    ) -> Result<Response<T>> {
        self.submit(job)?.recv().map_err(|_| {
            StoreError::Unavailable(format!("{} failed to answer the request", self.shared.name))
        })
    }

    /// Queues a job that gets the queue length at its completion (fire and forget).
    pub fn spawn(&self, job: impl FnOnce(&R, usize) + Send + 'static) -> Result<()> {
        self.enqueue(Box::new(job))
    }

    fn enqueue(&self, job: Job<R>) -> Result<()> {
        let shared = &self.shared;
        let mut queue = shared.queue.lock().expect("request queue poisoned");
        if shared.closed.load(Ordering::Relaxed) {
            return Err(StoreError::Unavailable(format!(
                "{} is shut down",
                shared.name
            )));
        }
        if queue.len() >= shared.capacity {
            shared.refused.fetch_add(1, Ordering::Relaxed);
            return Err(StoreError::Overloaded(format!(
                "the request queue of {} is full ({} requests); retry later",
                shared.name, shared.capacity
            )));
        }
        queue.push_back(job);
        shared.queue_length.store(queue.len(), Ordering::Relaxed);
        shared.accepted.fetch_add(1, Ordering::Relaxed);
        drop(queue);
        shared.work_ready.notify_one();
        Ok(())
    }

    /// Requests waiting now.
    pub fn queue_length(&self) -> usize {
        self.shared.queue_length.load(Ordering::Relaxed)
    }

    /// The queue's bound.
    pub fn capacity(&self) -> usize {
        self.shared.capacity
    }

    /// Worker threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// The replica served.
    pub fn replica(&self) -> &R {
        &self.shared.replica
    }

    /// Counters since start.
    pub fn counters(&self) -> PoolCounters {
        let shared = &self.shared;
        PoolCounters {
            accepted: shared.accepted.load(Ordering::Relaxed),
            refused: shared.refused.load(Ordering::Relaxed),
            completed: shared.completed.load(Ordering::Relaxed),
            busy_nanos: shared.busy_nanos.load(Ordering::Relaxed),
        }
    }

    /// Stops accepting, answers what is queued, and joins the workers.
    pub fn shutdown(&self) {
        self.shared.closed.store(true, Ordering::Relaxed);
        self.shared.work_ready.notify_all();
        let workers = std::mem::take(&mut *self.workers.lock().expect("worker list poisoned"));
        for worker in workers {
            let _ = worker.join();
        }
    }
}

impl<R: Send + Sync + 'static> Drop for ReplicaPool<R> {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn serve<R>(shared: &Shared<R>) {
    loop {
        let job = {
            let mut queue = shared.queue.lock().expect("request queue poisoned");
            loop {
                if let Some(job) = queue.pop_front() {
                    shared.queue_length.store(queue.len(), Ordering::Relaxed);
                    break job;
                }
                if shared.closed.load(Ordering::Relaxed) {
                    return;
                }
                queue = shared
                    .work_ready
                    .wait(queue)
                    .expect("request queue poisoned");
            }
        };
        let started = Instant::now();
        // A panicking job must not take the worker (and the replica) down with it; the
        // requester sees its channel closed and reports an error.
        let queue_length = &shared.queue_length;
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            job(&shared.replica, queue_length.load(Ordering::Relaxed))
        }));
        let _ = outcome;
        shared
            .busy_nanos
            .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        shared.completed.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn answers_in_order_and_refuses_when_full() {
        let pool = ReplicaPool::start("test replica", 10u64, 1, 2).unwrap();
        let (gate_tx, gate_rx) = mpsc::channel::<()>();
        // Block the single worker so the queue fills.
        let blocker = pool.submit(move |r| {
            gate_rx.recv().unwrap();
            *r
        });
        let blocker = blocker.unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while pool.queue_length() != 0 && Instant::now() < deadline {
            std::thread::yield_now();
        }
        let a = pool.submit(|r| r + 1).unwrap();
        let b = pool.submit(|r| r + 2).unwrap();
        assert_eq!(pool.queue_length(), 2);
        let refused = pool.submit(|r| r + 3).unwrap_err();
        assert!(matches!(refused, StoreError::Overloaded(_)), "{refused}");
        gate_tx.send(()).unwrap();
        assert_eq!(blocker.recv().unwrap().value, 10);
        // One worker: when `a` runs, `b` is the one request still waiting.
        let (a, b) = (a.recv().unwrap(), b.recv().unwrap());
        assert_eq!((a.value, a.queue_length), (11, 1));
        assert_eq!((b.value, b.queue_length), (12, 0));
        let answered = pool.execute(|r| r * 2).unwrap();
        assert_eq!((answered.value, answered.queue_length), (20, 0));
        // A worker counts a job after the job has answered, so wait for the count.
        let deadline = Instant::now() + Duration::from_secs(10);
        while pool.counters().completed < 4 && Instant::now() < deadline {
            std::thread::yield_now();
        }
        let counters = pool.counters();
        assert_eq!(
            (counters.accepted, counters.refused, counters.completed),
            (4, 1, 4)
        );
        pool.shutdown();
        assert!(matches!(
            pool.submit(|r| *r),
            Err(StoreError::Unavailable(_))
        ));
    }

    #[test]
    fn a_panicking_job_does_not_kill_the_worker() {
        let pool = ReplicaPool::start("test replica", (), 1, 4).unwrap();
        let failed = pool.execute(|_| -> u32 { panic!("job failed on purpose") });
        assert!(matches!(failed, Err(StoreError::Unavailable(_))));
        assert_eq!(pool.execute(|_| 7).unwrap().value, 7);
    }
}
