//! etcd: the cluster's metadata, membership and election.
//!
//! [`Etcd`] is one connection with its own small runtime, so that the node crate's
//! synchronous traits (the catalog's) can call it from any thread, inside an async
//! server or not. Every call has a deadline ([`EtcdConfig::request_timeout`]); a call
//! that misses it is [`ClusterError::Unavailable`], never a hang. The key layout is in
//! [`keys`] and `docs/cluster-metadata.md`.

pub mod catalog;
pub mod election;
pub mod history;
pub mod keys;
pub mod local;
pub mod membership;

use std::future::Future;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};

use crate::error::{ClusterError, Result};
use crate::runtime::Bridge;

pub use catalog::EtcdCatalog;
pub use election::{leader, leader_of, read_coordinated, Candidate, Leader, Leadership};
pub use keys::Keys;
pub use local::LocalEtcd;
pub use membership::{members, MemberCard, Membership, Role};

/// Default deadline of one etcd request.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Most endpoints a configuration lists.
pub const MAX_ENDPOINTS: usize = 16;

/// How to reach etcd, and under which root this cluster's keys live.
#[derive(Clone, Debug)]
pub struct EtcdConfig {
    /// `http://host:port` endpoints of one etcd cluster.
    pub endpoints: Vec<String>,
    /// The cluster's name: its keys live under `/puffer/<name>/`, so that clusters
    /// can share an etcd.
    pub cluster: String,
    /// Deadline of one request (connecting included).
    pub request_timeout: Duration,
}

impl EtcdConfig {
    /// A configuration from a comma-separated endpoint list (`--etcd`).
    pub fn new(endpoints: &str, cluster: &str) -> Result<EtcdConfig> {
        let endpoints: Vec<String> = endpoints
            .split(',')
            .map(|e| e.trim())
            .filter(|e| !e.is_empty())
            .map(|e| {
                if e.contains("://") {
                    e.to_string()
                } else {
                    format!("http://{e}")
                }
            })
            .collect();
        let config = EtcdConfig {
            endpoints,
            cluster: cluster.to_string(),
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        };
        config.validate()?;
        Ok(config)
    }

    /// Checks the endpoints and the cluster name.
    pub fn validate(&self) -> Result<()> {
        if self.endpoints.is_empty() || self.endpoints.len() > MAX_ENDPOINTS {
            return Err(ClusterError::Invalid(format!(
                "give 1 to {MAX_ENDPOINTS} etcd endpoints, got {}",
                self.endpoints.len()
            )));
        }
        if let Some(bad) = self
            .endpoints
            .iter()
            .find(|e| !(e.starts_with("http://") || e.starts_with("https://")) || e.len() > 256)
        {
            return Err(ClusterError::Invalid(format!(
                "an etcd endpoint is http://host:port, got {bad:?}"
            )));
        }
        Keys::check_cluster_name(&self.cluster)?;
        if self.request_timeout.is_zero() || self.request_timeout > Duration::from_secs(600) {
            return Err(ClusterError::Invalid(
                "an etcd request timeout is between 1 ms and 600 s".into(),
            ));
        }
        Ok(())
    }
}

/// One connection to etcd. Cheap to clone; clones share the connection.
#[derive(Clone)]
pub struct Etcd {
    runtime: Bridge,
    client: Client,
    keys: Keys,
    request_timeout: Duration,
}

impl std::fmt::Debug for Etcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Etcd")
            .field("root", &self.keys.root())
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}

impl Etcd {
    /// Connects; `Unavailable` if no endpoint answers within the request timeout.
    pub fn connect(config: &EtcdConfig) -> Result<Etcd> {
        config.validate()?;
        let runtime = Bridge::start("puffer-etcd")?;
        let options = ConnectOptions::new()
            .with_connect_timeout(config.request_timeout)
            .with_timeout(config.request_timeout)
            .with_keep_alive(Duration::from_secs(2), config.request_timeout);
        let endpoints = config.endpoints.clone();
        let client = runtime
            .call(config.request_timeout, async move {
                let mut client = Client::connect(endpoints, Some(options)).await?;
                // Connecting is lazy; a status call proves that an endpoint answers.
                client.status().await?;
                Ok::<_, etcd_client::Error>(client)
            })
            .map_err(|e| {
                ClusterError::Unavailable(format!(
                    "no etcd answers at {}: {e}",
                    config.endpoints.join(",")
                ))
            })?;
        Ok(Etcd {
            runtime,
            client,
            keys: Keys::new(&config.cluster)?,
            request_timeout: config.request_timeout,
        })
    }

    /// This cluster's keys.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// The deadline of one request.
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// Runs `call` on the connection's runtime and waits for it, at most the request
    /// timeout.
    pub fn call<T, F, Fut>(&self, call: F) -> Result<T>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, etcd_client::Error>> + Send + 'static,
        T: Send + 'static,
    {
        let future = call(self.client.clone());
        self.runtime.call(self.request_timeout, future)
    }

    /// Spawns a background task on the connection's runtime (lease keep-alives,
    /// campaigns); it stops with the last clone of this connection.
    pub fn spawn<Fut>(&self, task: Fut) -> tokio::task::JoinHandle<Fut::Output>
    where
        Fut: Future + Send + 'static,
        Fut::Output: Send + 'static,
    {
        self.runtime.spawn(task)
    }

    /// The client, for tasks spawned with [`Etcd::spawn`].
    pub fn client(&self) -> Client {
        self.client.clone()
    }
}
