//! What the cluster tests share: an etcd of their own, or a loud skip.
#![allow(dead_code)] // each test file uses part of this module

use puffer_cluster::etcd::LocalEtcd;

/// Set (CI sets it) to make a missing service a failure rather than a skip.
pub const REQUIRE_SERVICES: &str = "PUFFER_REQUIRE_SERVICES";

/// A started etcd with its temporary directory, or `None` after saying loudly why
/// the test skips.
pub fn etcd_or_skip(test: &str) -> Option<(LocalEtcd, tempfile::TempDir)> {
    if LocalEtcd::binary().is_none() {
        if std::env::var_os(REQUIRE_SERVICES).is_some() {
            panic!("{test}: no etcd binary, and {REQUIRE_SERVICES} is set");
        }
        eprintln!(
            "\n*** SKIPPED {test}: no etcd binary (install Debian's etcd-server or set \
             PUFFER_ETCD_BIN) ***\n"
        );
        return None;
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    let etcd = LocalEtcd::start(&dir.path().join("etcd")).expect("etcd starts");
    Some((etcd, dir))
}

/// An S3-compatible server of the test's own: moto's standalone server (PyPI
/// `moto[server]`), killed when dropped.
pub struct Moto {
    child: std::process::Child,
    /// `http://127.0.0.1:<port>`.
    pub endpoint: String,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Moto {
    /// S3 settings for this server.
    pub fn settings(&self) -> puffer_cluster::S3Settings {
        puffer_cluster::S3Settings {
            endpoint: Some(self.endpoint.clone()),
            access_key_id: Some("test".into()),
            secret_access_key: Some("test".into()),
            region: Some("us-east-1".into()),
        }
    }

    /// Makes bucket `bucket`.
    pub fn create_bucket(&self, bucket: &str) {
        ureq::put(&format!("{}/{bucket}", self.endpoint))
            .call()
            .expect("moto makes the bucket");
    }
}

/// The moto server binary: `$PUFFER_MOTO_BIN`, else `moto_server` on the `PATH`.
fn moto_binary() -> Option<std::path::PathBuf> {
    if let Some(path) = std::env::var_os("PUFFER_MOTO_BIN") {
        return Some(path.into());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("moto_server"))
        .find(|candidate| candidate.is_file())
}

/// A started moto server, or `None` after saying loudly why the test skips.
pub fn moto_or_skip(test: &str) -> Option<Moto> {
    let Some(binary) = moto_binary() else {
        if std::env::var_os(REQUIRE_SERVICES).is_some() {
            panic!("{test}: no moto_server, and {REQUIRE_SERVICES} is set");
        }
        eprintln!(
            "\n*** SKIPPED {test}: no moto_server (pip install 'moto[server]', or set \
             PUFFER_MOTO_BIN) ***\n"
        );
        return None;
    };
    let port = puffer_cluster::etcd::local::free_port().unwrap();
    let child = std::process::Command::new(binary)
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("moto_server starts");
    let moto = Moto {
        child,
        endpoint: format!("http://127.0.0.1:{port}"),
    };
    let started = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "moto_server did not listen within 30 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    Some(moto)
}
