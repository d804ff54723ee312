//! A `puffer serve` of the bench's own, on a data directory, killed when dropped.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use anyhow::Context;

use crate::stats::status_kb_field_bytes;

/// A running `puffer serve` on a port of its choosing.
pub struct Served {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    /// Starts `puffer` (a binary path) serving `data` with environment `env`, and waits
    /// for the address it prints.
    pub fn start(puffer: &Path, data: &Path, env: &[(&str, String)]) -> anyhow::Result<Served> {
        let mut command = Command::new(puffer);
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--data"])
            .arg(data)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command
            .spawn()
            .with_context(|| format!("starting {}", puffer.display()))?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().context("piped stdout")?).read_line(&mut line)?;
        let base = line
            .trim()
            .strip_prefix("listening on ")
            .with_context(|| format!("the server printed {line:?} instead of its address"))?
            .to_string();
        Ok(Served { child, base })
    }

    /// A `kB` field of the server's `/proc/PID/status` (`VmRSS:`, `VmHWM:`), in bytes.
    pub fn status_bytes(&self, field: &str) -> u64 {
        status_kb_field_bytes(&format!("/proc/{}/status", self.child.id()), field)
    }

    /// Resets the kernel's peak resident memory of the server (`VmHWM`) to its current
    /// one.
    pub fn reset_peak_memory(&self) -> anyhow::Result<()> {
        std::fs::write(format!("/proc/{}/clear_refs", self.child.id()), "5")
            .context("resetting the server's peak memory (/proc/PID/clear_refs)")
    }
}
