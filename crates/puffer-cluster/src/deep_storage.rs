//! Deep storage: where immutable segment files and the SCU log live beyond any one
//! node, through `object_store` — a local (or shared) directory, or S3.
//!
//! Every object is framed: magic, payload length and CRC-32 before the payload, so a
//! damaged or truncated object is reported as `Corrupt`, never read as data. Objects
//! are immutable: writing a name again with the same bytes is a no-op (a retried
//! upload), with other bytes an error. Where the store can create an object only if
//! it is absent (a directory; S3 with `AWS_CONDITIONAL_PUT=etag`) a write is one
//! request; elsewhere it looks first (one more request per object). Every call has a deadline that grows with the
//! bytes it moves.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use object_store::{ClientOptions, ObjectStore, ObjectStoreExt, PutMode, PutPayload, RetryConfig};

use crate::error::{ClusterError, Result};
use crate::runtime::Bridge;

/// The frame's magic: PufferDB deep-storage object, version 1.
pub const MAGIC: &[u8; 8] = b"PUFDS001";
/// Bytes of the frame before the payload: magic, length (u64 LE), CRC-32 (u32 LE).
pub const HEADER_BYTES: usize = 8 + 8 + 4;
/// Largest payload of one object (one S3 PUT takes at most 5 GB; a segment larger
/// than this is refused rather than half uploaded).
pub const MAX_OBJECT_BYTES: u64 = 1 << 30;
/// Most names one listing returns.
pub const MAX_LISTED: usize = 1_000_000;
/// Longest object name.
pub const MAX_NAME_BYTES: usize = 512;
/// The deadline of a call that moves no bytes.
pub const BASE_DEADLINE: Duration = Duration::from_secs(30);
/// The slowest transfer a deadline allows for, in bytes per second.
pub const MIN_TRANSFER_BYTES_PER_S: u64 = 4 << 20;

/// A deep storage: an object store, and where in it this cluster's objects are.
#[derive(Clone)]
pub struct DeepStorage {
    store: Arc<dyn ObjectStore>,
    bridge: Bridge,
    location: String,
}

impl std::fmt::Debug for DeepStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeepStorage")
            .field("location", &self.location)
            .finish()
    }
}

/// Checks an object name: `/`-separated parts of `[A-Za-z0-9._-]`, none empty, `.`
/// or `..`.
pub fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && name.split('/').all(|part| {
            !part.is_empty()
                && part != "."
                && part != ".."
                && part
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        });
    if ok {
        Ok(())
    } else {
        Err(ClusterError::Invalid(format!(
            "an object name is /-separated parts of A-Z, a-z, 0-9, ., _ and - (at most \
             {MAX_NAME_BYTES} bytes); got {name:?}"
        )))
    }
}

/// The deadline of a call moving `bytes`.
fn deadline(bytes: u64) -> Duration {
    BASE_DEADLINE + Duration::from_secs(bytes / MIN_TRANSFER_BYTES_PER_S)
}

/// `payload` framed for storage.
pub fn frame(payload: &[u8]) -> Vec<u8> {
    let mut framed = Vec::with_capacity(HEADER_BYTES + payload.len());
    framed.extend_from_slice(MAGIC);
    framed.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    framed.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    framed.extend_from_slice(payload);
    framed
}

/// The payload of a framed object, checked.
pub fn unframe(name: &str, framed: &[u8]) -> Result<Vec<u8>> {
    let corrupt = |detail: String| ClusterError::Corrupt {
        key: name.to_string(),
        detail,
    };
    if framed.len() < HEADER_BYTES || &framed[..8] != MAGIC {
        return Err(corrupt(
            "not a PufferDB deep-storage object (bad magic)".into(),
        ));
    }
    let length = u64::from_le_bytes(framed[8..16].try_into().expect("8 bytes"));
    let crc = u32::from_le_bytes(framed[16..20].try_into().expect("4 bytes"));
    let payload = &framed[HEADER_BYTES..];
    if payload.len() as u64 != length {
        return Err(corrupt(format!(
            "the frame says {length} bytes, the object has {}",
            payload.len()
        )));
    }
    if crc32fast::hash(payload) != crc {
        return Err(corrupt("checksum mismatch".into()));
    }
    Ok(payload.to_vec())
}

/// S3 settings beyond the `AWS_*` variables (which give the rest): for an
/// S3-compatible server of one's own.
#[derive(Clone, Debug, Default)]
pub struct S3Settings {
    /// `http(s)://host:port` of the server (path-style requests).
    pub endpoint: Option<String>,
    /// Access key id.
    pub access_key_id: Option<String>,
    /// Secret access key.
    pub secret_access_key: Option<String>,
    /// Region.
    pub region: Option<String>,
}

impl DeepStorage {
    /// Opens `spec`: `s3://bucket[/prefix]` (credentials, region and endpoint from the
    /// usual `AWS_*` variables), `file:///dir`, or a directory path (made if missing).
    pub fn open(spec: &str) -> Result<DeepStorage> {
        DeepStorage::open_with(spec, &S3Settings::default())
    }

    /// Opens `spec` as [`DeepStorage::open`] does, with `s3` over the variables.
    pub fn open_with(spec: &str, s3: &S3Settings) -> Result<DeepStorage> {
        let bridge = Bridge::start("puffer-deep-storage")?;
        let (store, location): (Arc<dyn ObjectStore>, String) =
            if let Some(rest) = spec.strip_prefix("s3://") {
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                if bucket.is_empty() {
                    return Err(ClusterError::Invalid(format!(
                        "an S3 deep storage is s3://bucket[/prefix]; got {spec:?}"
                    )));
                }
                let plain_http = s3
                    .endpoint
                    .as_deref()
                    .is_some_and(|e| e.starts_with("http://"));
                let options = ClientOptions::new()
                    .with_allow_http(plain_http)
                    .with_timeout(BASE_DEADLINE)
                    .with_connect_timeout(Duration::from_secs(5));
                let retry = RetryConfig {
                    max_retries: 3,
                    retry_timeout: BASE_DEADLINE,
                    ..RetryConfig::default()
                };
                let mut builder = AmazonS3Builder::from_env();
                if let Some(endpoint) = &s3.endpoint {
                    builder = builder
                        .with_endpoint(endpoint)
                        .with_virtual_hosted_style_request(false);
                }
                if let Some(id) = &s3.access_key_id {
                    builder = builder.with_access_key_id(id);
                }
                if let Some(secret) = &s3.secret_access_key {
                    builder = builder.with_secret_access_key(secret);
                }
                if let Some(region) = &s3.region {
                    builder = builder.with_region(region);
                }
                let s3 = builder
                    .with_bucket_name(bucket)
                    .with_client_options(options)
                    .with_retry(retry)
                    .build()
                    .map_err(|e| ClusterError::Invalid(format!("S3 deep storage {spec}: {e}")))?;
                let store: Arc<dyn ObjectStore> = if prefix.trim_matches('/').is_empty() {
                    Arc::new(s3)
                } else {
                    Arc::new(object_store::prefix::PrefixStore::new(
                        s3,
                        prefix.trim_matches('/'),
                    ))
                };
                (store, spec.to_string())
            } else {
                let dir = PathBuf::from(spec.strip_prefix("file://").unwrap_or(spec));
                if spec.contains("://") && !spec.starts_with("file://") {
                    return Err(ClusterError::Invalid(format!(
                        "deep storage is a directory, file:///dir or s3://bucket/prefix; got \
                         {spec:?}"
                    )));
                }
                std::fs::create_dir_all(&dir).map_err(|e| {
                    ClusterError::Unavailable(format!(
                        "cannot make deep storage directory {}: {e}",
                        dir.display()
                    ))
                })?;
                let local = LocalFileSystem::new_with_prefix(&dir).map_err(|e| {
                    ClusterError::Invalid(format!("deep storage {}: {e}", dir.display()))
                })?;
                (Arc::new(local), dir.display().to_string())
            };
        Ok(DeepStorage {
            store,
            bridge,
            location,
        })
    }

    /// Where it is, as given.
    pub fn location(&self) -> &str {
        &self.location
    }

    fn call<T, Fut>(&self, bytes: u64, future: Fut) -> Result<T>
    where
        Fut: std::future::Future<Output = object_store::Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        let location = self.location.clone();
        self.bridge.call(deadline(bytes), async move {
            future.await.map_err(|e| match e {
                object_store::Error::NotFound { path, .. } => {
                    ClusterError::NotFound(format!("{path} in deep storage {location}"))
                }
                other => ClusterError::Unavailable(format!("deep storage {location}: {other}")),
            })
        })
    }

    /// Stores `payload` as `name`, once: again with the same bytes is a no-op, with
    /// other bytes `Invalid`.
    pub fn put(&self, name: &str, payload: &[u8]) -> Result<()> {
        check_name(name)?;
        if payload.len() as u64 > MAX_OBJECT_BYTES {
            return Err(ClusterError::Invalid(format!(
                "{name} has {} bytes; a deep-storage object has at most {MAX_OBJECT_BYTES}",
                payload.len()
            )));
        }
        // One request where the store can create only if absent (a directory; S3
        // with `AWS_CONDITIONAL_PUT=etag`); a look first where it cannot.
        let created = {
            let store = Arc::clone(&self.store);
            let path = ObjectPath::from(name);
            let framed = PutPayload::from(frame(payload));
            self.call(payload.len() as u64, async move {
                match store.put_opts(&path, framed, PutMode::Create.into()).await {
                    Ok(_) => Ok(Some(true)),
                    Err(object_store::Error::AlreadyExists { .. }) => Ok(Some(false)),
                    Err(object_store::Error::NotImplemented { .. }) => Ok(None),
                    Err(other) => Err(other),
                }
            })?
        };
        if created == Some(true) {
            return Ok(());
        }
        match self.get(name) {
            Ok(existing) if existing == payload => return Ok(()),
            Ok(_) => {
                return Err(ClusterError::Invalid(format!(
                    "{name} exists in deep storage with other content; objects are immutable"
                )))
            }
            // Not there (and the store cannot create only if absent): written below.
            Err(ClusterError::NotFound(_)) => {}
            // A damaged copy is replaced by a good one.
            Err(ClusterError::Corrupt { .. }) => {}
            Err(other) => return Err(other),
        }
        let store = Arc::clone(&self.store);
        let path = ObjectPath::from(name);
        let framed = PutPayload::from(frame(payload));
        self.call(payload.len() as u64, async move {
            store.put(&path, framed).await.map(|_| ())
        })
    }

    /// The payload of `name`, checked; `NotFound` if there is none.
    pub fn get(&self, name: &str) -> Result<Vec<u8>> {
        check_name(name)?;
        let store = Arc::clone(&self.store);
        let path = ObjectPath::from(name);
        let framed = self.call(MAX_OBJECT_BYTES, async move {
            let object = store.get(&path).await?;
            if object.meta.size as u64 > MAX_OBJECT_BYTES + HEADER_BYTES as u64 {
                return Err(object_store::Error::Generic {
                    store: "deep storage",
                    source: format!("{} is larger than any object PufferDB writes", path).into(),
                });
            }
            object.bytes().await
        })?;
        unframe(name, &framed)
    }

    /// The names under `prefix` (a name, or empty for all), ascending.
    pub fn list(&self, prefix: &str) -> Result<Vec<String>> {
        if !prefix.is_empty() {
            check_name(prefix)?;
        }
        let store = Arc::clone(&self.store);
        let prefix = (!prefix.is_empty()).then(|| ObjectPath::from(prefix));
        let mut names = self.call(0, async move {
            let mut listing = store.list(prefix.as_ref());
            let mut names = Vec::new();
            while let Some(meta) = listing.next().await {
                names.push(meta?.location.to_string());
                if names.len() > MAX_LISTED {
                    return Err(object_store::Error::Generic {
                        store: "deep storage",
                        source: format!("more than {MAX_LISTED} objects under one prefix").into(),
                    });
                }
            }
            Ok(names)
        })?;
        names.sort();
        Ok(names)
    }

    /// Removes `name` (no error if it is not there).
    pub fn delete(&self, name: &str) -> Result<()> {
        check_name(name)?;
        let store = Arc::clone(&self.store);
        let path = ObjectPath::from(name);
        match self.call(0, async move { store.delete(&path).await }) {
            Ok(()) | Err(ClusterError::NotFound(_)) => Ok(()),
            Err(other) => Err(other),
        }
    }

    /// Uploads every file of `dir` (not its subdirectories) as `prefix/<file name>`;
    /// the bytes uploaded.
    pub fn upload_dir(&self, dir: &Path, prefix: &str) -> Result<u64> {
        check_name(prefix)?;
        let io = |e: std::io::Error| {
            ClusterError::Unavailable(format!("cannot read {}: {e}", dir.display()))
        };
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(io)?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|path| path.is_file())
            .collect();
        files.sort();
        let mut bytes = 0;
        for file in files {
            let Some(file_name) = file.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let payload = std::fs::read(&file).map_err(io)?;
            self.put(&format!("{prefix}/{file_name}"), &payload)?;
            bytes += payload.len() as u64;
        }
        Ok(bytes)
    }

    /// Downloads every object under `prefix/` into `dir` (made if missing), each
    /// written to a temporary name and renamed, so a file is there whole or not at all;
    /// the bytes downloaded.
    pub fn download_dir(&self, prefix: &str, dir: &Path) -> Result<u64> {
        let io = |e: std::io::Error| {
            ClusterError::Unavailable(format!("cannot write {}: {e}", dir.display()))
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let mut bytes = 0;
        for name in self.list(prefix)? {
            let Some(file_name) = name.strip_prefix(prefix).map(|n| n.trim_start_matches('/'))
            else {
                continue;
            };
            if file_name.is_empty() || file_name.contains('/') {
                continue;
            }
            let payload = self.get(&name)?;
            let partial = dir.join(format!("{file_name}.partial"));
            std::fs::write(&partial, &payload).map_err(io)?;
            std::fs::rename(&partial, dir.join(file_name)).map_err(io)?;
            bytes += payload.len() as u64;
        }
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_detect_damage() {
        let payload = b"segment bytes".to_vec();
        let framed = frame(&payload);
        assert_eq!(unframe("x", &framed).unwrap(), payload);
        // Every single-byte flip and every truncation is caught.
        for i in 0..framed.len() {
            let mut bad = framed.clone();
            bad[i] ^= 0x40;
            assert!(unframe("x", &bad).is_err(), "flip at {i} passed");
        }
        for cut in 0..framed.len() {
            assert!(unframe("x", &framed[..cut]).is_err(), "cut at {cut} passed");
        }
    }

    #[test]
    fn names_are_checked() {
        for good in ["a", "segments/t1/s0/000001.seg", "log/00000000000000000001"] {
            check_name(good).unwrap();
        }
        for bad in ["", "/a", "a/", "a//b", "../a", "a/./b", "a b", "é"] {
            assert!(check_name(bad).is_err(), "{bad:?} was taken");
        }
    }
}
