//! A replica's bounded request queue and the worker threads that serve it.
//!
//! The queue is what the adaptivity runtime watches: requests wait here when they arrive
//! faster than the workers answer. It is bounded; a full queue refuses a request at once
//! with a retryable [`StoreError::Overloaded`] rather than absorbing it.
//!
//! A replica runs at most `threads` requests at once: each running request holds one of
//! `threads` worker slots. A request that waits for its answer ([`ReplicaPool::execute`])
//! and finds a slot free and nobody queued runs on the caller's thread under that slot,
//! sparing two thread hand-offs, which cost more than a short query; otherwise it waits
//! in the queue for a worker, exactly as a submitted request does.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use puffer_store::{Result, StoreError};

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
    /// Requests accepted (queued, or run at once on a caller's thread).
    pub accepted: u64,
    /// Requests refused because the queue was full.
    pub refused: u64,
    /// Requests answered.
    pub completed: u64,
    /// Nanoseconds spent answering (by workers and on callers' threads).
    pub busy_nanos: u64,
}

/// What the queue's mutex guards.
struct QueueState<R> {
    jobs: VecDeque<Job<R>>,
    /// Worker slots in use (jobs running on workers or on callers' threads).
    running: usize,
}

struct Shared<R> {
    replica: R,
    name: String,
    capacity: usize,
    threads: usize,
    queue: Mutex<QueueState<R>>,
    /// Signalled when a job is queued or a slot is released.
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
        let threads = threads.max(1);
        let shared = Arc::new(Shared {
            replica,
            name,
            capacity,
            threads,
            queue: Mutex::new(QueueState {
                jobs: VecDeque::new(),
                running: 0,
            }),
            work_ready: Condvar::new(),
            queue_length: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            accepted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            busy_nanos: AtomicU64::new(0),
        });
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

    /// Runs `job` and waits for its response: on this thread when a worker slot is free
    /// and no request is queued, otherwise through the queue.
    pub fn execute<T: Send + 'static>(
        &self,
        job: impl FnOnce(&R) -> T + Send + 'static,
    ) -> Result<Response<T>> {
        match self.try_run_here(job)? {
            Ok(response) => Ok(response),
            Err(job) => self.submit(job)?.recv().map_err(|_| self.failed()),
        }
    }

    /// Runs `job` on this thread if a worker slot is free and no request is queued;
    /// otherwise gives `job` back untouched (`Err(job)`), so a caller that must not wait
    /// (an event loop thread) can hand it to a thread that may.
    pub fn try_run_here<T, F: FnOnce(&R) -> T>(
        &self,
        job: F,
    ) -> Result<std::result::Result<Response<T>, F>> {
        let shared = &self.shared;
        {
            let mut state = shared.queue.lock().expect("request queue poisoned");
            if shared.closed.load(Ordering::Relaxed) {
                return Err(self.shut_down());
            }
            if !state.jobs.is_empty() || state.running >= shared.threads {
                return Ok(Err(job));
            }
            state.running += 1;
            shared.accepted.fetch_add(1, Ordering::Relaxed);
        }
        let started = Instant::now();
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&shared.replica)));
        shared.finish_job(started);
        let value = outcome.map_err(|_| self.failed())?;
        Ok(Ok(Response {
            value,
            queue_length: shared.queue_length.load(Ordering::Relaxed),
        }))
    }

    fn shut_down(&self) -> StoreError {
        StoreError::Unavailable(format!("{} is shut down", self.shared.name))
    }

    fn failed(&self) -> StoreError {
        StoreError::Unavailable(format!("{} failed to answer the request", self.shared.name))
    }

    /// Queues a job that gets the queue length at its completion (fire and forget).
    pub fn spawn(&self, job: impl FnOnce(&R, usize) + Send + 'static) -> Result<()> {
        self.enqueue(Box::new(job))
    }

    fn enqueue(&self, job: Job<R>) -> Result<()> {
        let shared = &self.shared;
        let mut state = shared.queue.lock().expect("request queue poisoned");
        if shared.closed.load(Ordering::Relaxed) {
            return Err(self.shut_down());
        }
        if state.jobs.len() >= shared.capacity {
            shared.refused.fetch_add(1, Ordering::Relaxed);
            return Err(StoreError::Overloaded(format!(
                "the request queue of {} is full ({} requests); retry later",
                shared.name, shared.capacity
            )));
        }
        state.jobs.push_back(job);
        shared
            .queue_length
            .store(state.jobs.len(), Ordering::Relaxed);
        shared.accepted.fetch_add(1, Ordering::Relaxed);
        drop(state);
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
        {
            // Under the lock: a worker between checking `closed` and waiting would
            // otherwise miss the wake-up and never exit.
            let _state = self.shared.queue.lock().expect("request queue poisoned");
            self.shared.closed.store(true, Ordering::Relaxed);
        }
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

impl<R> Shared<R> {
    /// Releases a worker slot after a job ran, counts the job, and wakes a worker if
    /// requests wait for the slot.
    fn finish_job(&self, started: Instant) {
        self.busy_nanos
            .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        self.completed.fetch_add(1, Ordering::Relaxed);
        let mut state = self.queue.lock().expect("request queue poisoned");
        state.running -= 1;
        let waiting = !state.jobs.is_empty();
        drop(state);
        if waiting {
            self.work_ready.notify_one();
        }
    }
}

fn serve<R>(shared: &Shared<R>) {
    loop {
        let job = {
            let mut state = shared.queue.lock().expect("request queue poisoned");
            loop {
                if state.running < shared.threads {
                    if let Some(job) = state.jobs.pop_front() {
                        state.running += 1;
                        shared
                            .queue_length
                            .store(state.jobs.len(), Ordering::Relaxed);
                        break job;
                    }
                }
                if shared.closed.load(Ordering::Relaxed) && state.jobs.is_empty() {
                    return;
                }
                state = shared
                    .work_ready
                    .wait(state)
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
        shared.finish_job(started);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Waits (at most 10 s) until `count` jobs are counted as completed: a worker
    /// counts a job just after the job has answered.
    fn wait_for_completed<R: Send + Sync + 'static>(pool: &ReplicaPool<R>, count: u64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while pool.counters().completed < count && Instant::now() < deadline {
            std::thread::yield_now();
        }
    }

    /// Waits for `completed` jobs, checks the counters, then shuts the pool down and
    /// checks that every way in refuses as unavailable.
    fn check_counts_then_shut_down(
        pool: &ReplicaPool<u64>,
        accepted: u64,
        refused: u64,
        completed: u64,
    ) {
        wait_for_completed(pool, completed);
        let counters = pool.counters();
        assert_eq!(
            (counters.accepted, counters.refused, counters.completed),
            (accepted, refused, completed)
        );
        pool.shutdown();
        assert!(matches!(
            pool.submit(|r| *r),
            Err(StoreError::Unavailable(_))
        ));
        assert!(matches!(
            pool.execute(|r| *r),
            Err(StoreError::Unavailable(_))
        ));
        assert!(matches!(
            pool.try_run_here(|r| *r),
            Err(StoreError::Unavailable(_))
        ));
    }

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
        check_counts_then_shut_down(&pool, 4, 1, 4);
    }

    #[test]
    fn a_free_slot_runs_the_job_here_and_a_busy_one_gives_it_back() {
        let pool = ReplicaPool::start("test replica", 5u64, 1, 4).unwrap();
        let caller = std::thread::current().id();
        // Free: runs on this thread, counted like a queued job.
        let here = pool
            .try_run_here(|r| (*r, std::thread::current().id()))
            .unwrap()
            .unwrap_or_else(|_| panic!("the slot was free"));
        assert_eq!(here.value, (5, caller));
        let through_execute = pool.execute(|r| r + 1).unwrap();
        assert_eq!(through_execute.value, 6);
        // Busy: the one slot is held by a blocked job on the worker.
        let (gate_tx, gate_rx) = mpsc::channel::<()>();
        let (started_tx, started_rx) = mpsc::channel::<()>();
        let blocker = pool
            .submit(move |r| {
                started_tx.send(()).unwrap();
                gate_rx.recv().unwrap();
                *r
            })
            .unwrap();
        started_rx.recv().unwrap();
        let given_back = pool.try_run_here(|r| r * 100).unwrap();
        let job = match given_back {
            Err(job) => job,
            Ok(response) => panic!("ran although the slot was busy: {}", response.value),
        };
        // The job given back still works, through the queue, once the slot frees.
        let queued = pool.submit(job).unwrap();
        assert_eq!(pool.queue_length(), 1);
        gate_tx.send(()).unwrap();
        assert_eq!(blocker.recv().unwrap().value, 5);
        assert_eq!(queued.recv().unwrap().value, 500);
        check_counts_then_shut_down(&pool, 4, 0, 4);
    }

    #[test]
    fn no_more_jobs_run_at_once_than_the_replica_has_threads() {
        use std::sync::atomic::AtomicUsize;
        let threads = 2;
        let pool = Arc::new(
            ReplicaPool::start(
                "test replica",
                (AtomicUsize::new(0), AtomicUsize::new(0)),
                threads,
                1024,
            )
            .unwrap(),
        );
        // Each job counts itself in and out; the high-water mark is the concurrency seen.
        fn job(state: &(AtomicUsize, AtomicUsize)) {
            let now = state.0.fetch_add(1, Ordering::SeqCst) + 1;
            state.1.fetch_max(now, Ordering::SeqCst);
            std::thread::sleep(Duration::from_micros(200));
            state.0.fetch_sub(1, Ordering::SeqCst);
        }
        std::thread::scope(|scope| {
            for _ in 0..6 {
                let pool = pool.clone();
                scope.spawn(move || {
                    for i in 0..40 {
                        if i % 2 == 0 {
                            pool.execute(job).unwrap();
                        } else if let Err(j) = pool.try_run_here(job).unwrap() {
                            pool.execute(j).unwrap();
                        }
                    }
                });
            }
        });
        let high_water = pool.replica().1.load(Ordering::SeqCst);
        wait_for_completed(&pool, 240);
        assert!(
            (1..=threads).contains(&high_water),
            "{high_water} jobs ran at once on a replica of {threads} threads"
        );
        assert_eq!(pool.counters().completed, 240);
    }

    #[test]
    fn a_panicking_job_does_not_kill_the_worker() {
        let pool = ReplicaPool::start("test replica", (), 1, 4).unwrap();
        let failed = pool.execute(|_| -> u32 { panic!("job failed on purpose") });
        assert!(matches!(failed, Err(StoreError::Unavailable(_))));
        assert_eq!(pool.execute(|_| 7).unwrap().value, 7);
    }
}
