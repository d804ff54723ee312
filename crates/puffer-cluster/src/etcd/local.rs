//! An etcd server of our own on loopback, for tests, benchmarks and
//! `scripts/cluster.sh`'s Rust callers: free ports, a data directory the caller owns,
//! killed when dropped.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{Etcd, EtcdConfig};
use crate::error::{ClusterError, Result};

/// How long a started etcd may take to answer.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);

/// One etcd process on 127.0.0.1.
#[derive(Debug)]
pub struct LocalEtcd {
    child: Option<Child>,
    binary: PathBuf,
    data_dir: PathBuf,
    client_port: u16,
    peer_port: u16,
}

impl LocalEtcd {
    /// The etcd binary: `$PUFFER_ETCD_BIN`, else `etcd` on the `PATH`.
    pub fn binary() -> Option<PathBuf> {
        if let Some(path) = std::env::var_os("PUFFER_ETCD_BIN") {
            return Some(PathBuf::from(path));
        }
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path)
            .map(|dir| dir.join("etcd"))
            .find(|candidate| candidate.is_file())
    }

    /// Starts etcd with its data in `data_dir` and waits until it answers.
    pub fn start(data_dir: &Path) -> Result<LocalEtcd> {
        let binary = LocalEtcd::binary().ok_or_else(|| {
            ClusterError::Unavailable(
                "no etcd binary: install Debian's etcd-server or set PUFFER_ETCD_BIN".into(),
            )
        })?;
        let mut etcd = LocalEtcd {
            child: None,
            binary,
            data_dir: data_dir.to_path_buf(),
            client_port: free_port()?,
            peer_port: free_port()?,
        };
        etcd.launch()?;
        Ok(etcd)
    }

    fn launch(&mut self) -> Result<()> {
        let client = format!("http://127.0.0.1:{}", self.client_port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::File::create(self.data_dir.with_extension("log"))
            .map_err(|e| ClusterError::Unavailable(format!("cannot create etcd's log: {e}")))?;
        let child = Command::new(&self.binary)
            .arg("--name")
            .arg("puffer")
            .arg("--data-dir")
            .arg(&self.data_dir)
            .arg("--listen-client-urls")
            .arg(&client)
            .arg("--advertise-client-urls")
            .arg(&client)
            .arg("--listen-peer-urls")
            .arg(&peer)
            .arg("--initial-advertise-peer-urls")
            .arg(&peer)
            .arg("--initial-cluster")
            .arg(format!("puffer={peer}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| {
                ClusterError::Unavailable(format!("cannot start {}: {e}", self.binary.display()))
            })?;
        self.child = Some(child);
        let started = Instant::now();
        loop {
            let mut config = EtcdConfig::new(&self.endpoint(), "probe")?;
            config.request_timeout = Duration::from_millis(500);
            if Etcd::connect(&config).is_ok() {
                return Ok(());
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                return Err(ClusterError::Unavailable(format!(
                    "etcd exited at start ({status}); see {}",
                    self.data_dir.with_extension("log").display()
                )));
            }
            if started.elapsed() > START_TIMEOUT {
                return Err(ClusterError::Unavailable(format!(
                    "etcd did not answer within {} s",
                    START_TIMEOUT.as_secs()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    /// A configuration for cluster `cluster` on this etcd.
    pub fn config(&self, cluster: &str) -> Result<EtcdConfig> {
        EtcdConfig::new(&self.endpoint(), cluster)
    }

    /// Kills the process (SIGKILL); its data stays for [`LocalEtcd::restart`].
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same ports and data.
    pub fn restart(&mut self) -> Result<()> {
        self.kill();
        self.launch()
    }
}

impl Drop for LocalEtcd {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A port free on 127.0.0.1 now (the OS picks it; it may be taken again before use,
/// which the caller sees as a failed start).
pub fn free_port() -> Result<u16> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .map_err(|e| ClusterError::Unavailable(format!("no free port on 127.0.0.1: {e}")))
}
