//! A small runtime of the cluster's own for async clients (etcd, object stores), so
//! that the node crate's synchronous traits can call them from any thread, inside an
//! async server or not, each call with a deadline.

use std::future::Future;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use crate::error::{ClusterError, Result};

/// Shuts its runtime down without blocking when the last handle goes, so that an
/// a [`Bridge`] may be dropped inside an async context.
#[derive(Debug)]
struct RuntimeOwner(Option<tokio::runtime::Runtime>);

impl Drop for RuntimeOwner {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

/// A handle on one such runtime; clones share it, and the last one stops it.
#[derive(Clone, Debug)]
pub struct Bridge(Arc<RuntimeOwner>);

impl Bridge {
    /// Starts a runtime of one worker thread called `name`.
    pub fn start(name: &str) -> Result<Bridge> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(name)
            .enable_all()
            .build()
            .map_err(|e| ClusterError::Unavailable(format!("cannot start runtime {name}: {e}")))?;
        Ok(Bridge(Arc::new(RuntimeOwner(Some(runtime)))))
    }

    fn runtime(&self) -> &tokio::runtime::Runtime {
        self.0
             .0
            .as_ref()
            .expect("the runtime lives as long as its owner")
    }

    /// Enters the runtime's context on this thread (for constructors that spawn).
    pub fn enter(&self) -> tokio::runtime::EnterGuard<'_> {
        self.runtime().enter()
    }

    /// Spawns a background task; it stops with the runtime.
    pub fn spawn<Fut>(&self, task: Fut) -> tokio::task::JoinHandle<Fut::Output>
    where
        Fut: Future + Send + 'static,
        Fut::Output: Send + 'static,
    {
        self.runtime().spawn(task)
    }

    /// Runs `future` on the runtime from any thread and waits at most `timeout`; a
    /// late answer is `Unavailable`.
    pub fn call<T, E, Fut>(&self, timeout: Duration, future: Fut) -> Result<T>
    where
        Fut: Future<Output = std::result::Result<T, E>> + Send + 'static,
        T: Send + 'static,
        E: Into<ClusterError> + Send + 'static,
    {
        let late = move || {
            ClusterError::Unavailable(format!("no answer within {} ms", timeout.as_millis()))
        };
        let (sender, receiver) = mpsc::sync_channel(1);
        self.runtime().spawn(async move {
            let answer = match tokio::time::timeout(timeout, future).await {
                Ok(answer) => answer.map_err(Into::into),
                Err(_) => Err(late()),
            };
            // The caller may have given up; then nobody listens.
            let _ = sender.send(answer);
        });
        // The task answers by its own deadline; the margin covers scheduling only.
        receiver
            .recv_timeout(timeout + Duration::from_secs(1))
            .unwrap_or_else(|_| Err(late()))
    }
}
