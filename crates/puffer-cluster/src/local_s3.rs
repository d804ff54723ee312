//! An S3-compatible server of our own on loopback, for tests and benchmarks: moto's
//! standalone server (PyPI `moto[server]`: pure Python from a registry this project
//! reaches, one command, S3's API including listing). Killed when dropped.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::deep_storage::S3Settings;
use crate::error::{ClusterError, Result};
use crate::etcd::local::free_port;

/// How long moto may take to listen.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

/// One moto server on 127.0.0.1.
#[derive(Debug)]
pub struct LocalS3 {
    child: Child,
    endpoint: String,
}

impl LocalS3 {
    /// The server binary: `$PUFFER_MOTO_BIN`, else `moto_server` on the `PATH`.
    pub fn binary() -> Option<PathBuf> {
        if let Some(path) = std::env::var_os("PUFFER_MOTO_BIN") {
            return Some(PathBuf::from(path));
        }
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path)
            .map(|dir| dir.join("moto_server"))
            .find(|candidate| candidate.is_file())
    }

    /// Starts it and waits until it listens.
    pub fn start() -> Result<LocalS3> {
        let binary = LocalS3::binary().ok_or_else(|| {
            ClusterError::Unavailable(
                "no moto_server: pip install 'moto[server]', or set PUFFER_MOTO_BIN".into(),
            )
        })?;
        let port = free_port()?;
        let child = Command::new(&binary)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                ClusterError::Unavailable(format!("cannot start {}: {e}", binary.display()))
            })?;
        let server = LocalS3 {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
        };
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if started.elapsed() > START_TIMEOUT {
                return Err(ClusterError::Unavailable(format!(
                    "moto_server did not listen within {} s",
                    START_TIMEOUT.as_secs()
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(server)
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Settings that reach it (moto takes any credentials).
    pub fn settings(&self) -> S3Settings {
        S3Settings {
            endpoint: Some(self.endpoint.clone()),
            access_key_id: Some("test".into()),
            secret_access_key: Some("test".into()),
            region: Some("us-east-1".into()),
        }
    }

    /// Makes bucket `bucket` (a plain PUT, which moto accepts unsigned).
    pub fn create_bucket(&self, bucket: &str) -> Result<()> {
        use std::io::{Read, Write};
        let address = self.endpoint.trim_start_matches("http://");
        let mut stream = std::net::TcpStream::connect(address)
            .map_err(|e| ClusterError::Unavailable(format!("moto at {address}: {e}")))?;
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| ClusterError::Unavailable(e.to_string()))?;
        write!(
            stream,
            "PUT /{bucket} HTTP/1.1\r\nHost: {address}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        .map_err(|e| ClusterError::Unavailable(format!("moto at {address}: {e}")))?;
        let mut answer = String::new();
        stream
            .read_to_string(&mut answer)
            .map_err(|e| ClusterError::Unavailable(format!("moto at {address}: {e}")))?;
        if answer.starts_with("HTTP/1.1 200") || answer.starts_with("HTTP/1.0 200") {
            Ok(())
        } else {
            Err(ClusterError::Unavailable(format!(
                "moto refused bucket {bucket}: {}",
                answer.lines().next().unwrap_or("")
            )))
        }
    }
}

impl Drop for LocalS3 {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
