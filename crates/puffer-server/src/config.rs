//! Server settings: defaults, a TOML file, then environment variables (`PUFFER_*`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::ApiError;

/// Everything the server can be told.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Data directory (tables and texts).
    pub data_dir: PathBuf,
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Largest request body, in bytes.
    pub max_body_bytes: usize,
    /// Most records in one batch (one SCU).
    pub max_batch_records: usize,
    /// Most rows one answer may hold.
    pub max_result_rows: usize,
    /// Longest text pattern, in bytes.
    pub max_pattern_bytes: usize,
    /// Largest uploaded text, in bytes.
    pub max_text_bytes: usize,
    /// Requests served at once; more are refused with 429 `overloaded`.
    pub max_concurrent_requests: usize,
    /// Bearer token for reads (none: auth off unless another token is set).
    pub read_token: Option<String>,
    /// Bearer token for reads and record writes.
    pub write_token: Option<String>,
    /// Bearer token for everything.
    pub admin_token: Option<String>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            data_dir: PathBuf::from("puffer-data"),
            listen: SocketAddr::from(([127, 0, 0, 1], 7878)),
            max_body_bytes: 16 << 20,
            max_batch_records: 100_000,
            max_result_rows: 100_000,
            max_pattern_bytes: 4096,
            max_text_bytes: 1 << 30,
            max_concurrent_requests: 256,
            read_token: None,
            write_token: None,
            admin_token: None,
        }
    }
}

impl ServerConfig {
    /// Defaults, overridden by `file` (TOML) if given, then by the environment.
    pub fn load(file: Option<&Path>) -> Result<ServerConfig, ApiError> {
        let mut config = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    ApiError::invalid(format!("cannot read config {}: {e}", path.display()))
                })?;
                toml::from_str(&text)
                    .map_err(|e| ApiError::invalid(format!("bad config {}: {e}", path.display())))?
            }
            None => ServerConfig::default(),
        };
        config.apply_env(|name| std::env::var(name).ok())?;
        Ok(config)
    }

    /// Applies `PUFFER_DATA`, `PUFFER_LISTEN`, `PUFFER_READ_TOKEN`, `PUFFER_WRITE_TOKEN`,
    /// `PUFFER_ADMIN_TOKEN`, `PUFFER_MAX_BODY_BYTES`, `PUFFER_MAX_BATCH_RECORDS`,
    /// `PUFFER_MAX_RESULT_ROWS`, `PUFFER_MAX_CONCURRENT_REQUESTS`.
    pub fn apply_env(&mut self, var: impl Fn(&str) -> Option<String>) -> Result<(), ApiError> {
        let number = |name: &str, text: String| {
            text.parse::<usize>()
                .map_err(|_| ApiError::invalid(format!("{name}={text} is not a number")))
        };
        if let Some(dir) = var("PUFFER_DATA") {
            self.data_dir = PathBuf::from(dir);
        }
        if let Some(listen) = var("PUFFER_LISTEN") {
            self.listen = listen.parse().map_err(|_| {
                ApiError::invalid(format!("PUFFER_LISTEN={listen} is not an address"))
            })?;
        }
        for (name, slot) in [
            ("PUFFER_READ_TOKEN", &mut self.read_token),
            ("PUFFER_WRITE_TOKEN", &mut self.write_token),
            ("PUFFER_ADMIN_TOKEN", &mut self.admin_token),
        ] {
            if let Some(token) = var(name) {
                *slot = Some(token);
            }
        }
        for (name, slot) in [
            ("PUFFER_MAX_BODY_BYTES", &mut self.max_body_bytes),
            ("PUFFER_MAX_BATCH_RECORDS", &mut self.max_batch_records),
            ("PUFFER_MAX_RESULT_ROWS", &mut self.max_result_rows),
            (
                "PUFFER_MAX_CONCURRENT_REQUESTS",
                &mut self.max_concurrent_requests,
            ),
        ] {
            if let Some(text) = var(name) {
                *slot = number(name, text)?;
            }
        }
        Ok(())
    }

    /// Whether any token is configured (then every /v1 request needs one).
    pub fn auth_enabled(&self) -> bool {
        self.read_token.is_some() || self.write_token.is_some() || self.admin_token.is_some()
    }
}
