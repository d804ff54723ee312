"""Fixtures: a real `puffer serve` process on a free loopback port.

The binary is `$PUFFER_BIN`, else `target/debug/puffer` under the repository root (two
directories above `clients/python`); build it first with `cargo build -p puffer`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import pytest

import pufferdb

REPO_ROOT = Path(__file__).resolve().parents[3]
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0


def puffer_binary() -> Path:
    """The server binary, or a test failure saying how to build it."""
    configured = os.environ.get("PUFFER_BIN")
    path = Path(configured) if configured else REPO_ROOT / "target" / "debug" / "puffer"
    if not path.is_file() or not os.access(path, os.X_OK):
        pytest.fail(
            f"the puffer binary is missing at {path}: run `cargo build -p puffer` "
            "(or set PUFFER_BIN)",
            pytrace=False,
        )
    return path


class ServerProcess:
    """`puffer serve --data DIR --listen 127.0.0.1:0`, its URL read from the first
    stdout line (`listening on http://ADDR`)."""

    def __init__(
        self,
        workdir: Path,
        env: Optional[Dict[str, str]] = None,
        listen: str = "127.0.0.1:0",
        args: Optional[List[str]] = None,
    ) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.data_dir = workdir / "data"
        self.stdout_path = workdir / "stdout.log"
        self.stderr_path = workdir / "stderr.log"
        full_env = {
            k: v for k, v in os.environ.items() if not k.startswith("PUFFER_") or k == "PUFFER_BIN"
        }
        full_env.update(env or {})
        self._stdout = open(self.stdout_path, "wb")
        self._stderr = open(self.stderr_path, "wb")
        self.process = subprocess.Popen(
            [
                str(puffer_binary()),
                "serve",
                "--data",
                str(self.data_dir),
                "--listen",
                listen,
                *(args or []),
            ],
            stdin=subprocess.DEVNULL,
            stdout=self._stdout,
            stderr=self._stderr,
            env=full_env,
        )
        self.url = self._wait_for_address()

    def _wait_for_address(self) -> str:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            text = self.stdout_path.read_text(errors="replace")
            if "\n" in text:
                first = text.split("\n", 1)[0].strip()
                prefix = "listening on "
                if not first.startswith(prefix):
                    self.stop()
                    pytest.fail(f"unexpected first stdout line: {first!r}", pytrace=False)
                return first[len(prefix):]
            if self.process.poll() is not None:
                break
            time.sleep(0.02)
        code = self.process.poll()
        self.stop()
        pytest.fail(
            f"the server did not start (exit code {code}); stderr:\n"
            + self.stderr_path.read_text(errors="replace"),
            pytrace=False,
        )
        raise AssertionError("unreachable")

    def stop(self) -> None:
        """Ctrl-C (graceful shutdown), then a kill if it lingers."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=STOP_TIMEOUT_S)
        self._stdout.close()
        self._stderr.close()


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for the whole session, auth off."""
    process = ServerProcess(tmp_path_factory.mktemp("puffer-server"))
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="session")
def client(server: ServerProcess) -> pufferdb.Client:
    return pufferdb.connect(server.url, timeout=30.0)
