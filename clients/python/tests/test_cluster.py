"""The client against a cluster's broker: etcd, one data node that leads ingest, and a
broker that holds no data. Everything goes through the broker (the table, the writes,
which it hands to the leader, and the reads, which it fans out to the data node) and is
checked against the Python oracle, as against one node.

Needs an etcd binary (Debian's `etcd-server`, or `$PUFFER_ETCD_BIN`); without one the
test says so and skips, unless `PUFFER_REQUIRE_SERVICES` is set (as in CI).
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import time
import urllib.request
from typing import Iterator, List

import pytest

import pufferdb
from _support import KEY, SCHEMA, keys, load
from conftest import ServerProcess

START_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def etcd_binary() -> str:
    found = os.environ.get("PUFFER_ETCD_BIN") or shutil.which("etcd")
    if found:
        return found
    if os.environ.get("PUFFER_REQUIRE_SERVICES"):
        pytest.fail("no etcd binary, and PUFFER_REQUIRE_SERVICES is set", pytrace=False)
    print("\n*** SKIPPED the cluster tests: no etcd binary (Debian: etcd-server) ***")
    pytest.skip("no etcd binary (Debian: etcd-server)")
    raise AssertionError("unreachable")


def etcd_healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The broker's URL, with etcd and a data node behind it."""
    etcd_bin = etcd_binary()
    work = tmp_path_factory.mktemp("puffer-cluster")
    client_port, peer_port = free_port(), free_port()
    etcd_log = open(work / "etcd.log", "wb")
    etcd = subprocess.Popen(
        [
            etcd_bin,
            "--name", "puffer",
            "--data-dir", str(work / "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{client_port}",
            "--advertise-client-urls", f"http://127.0.0.1:{client_port}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-cluster", f"puffer=http://127.0.0.1:{peer_port}",
        ],
        stdout=etcd_log,
        stderr=subprocess.STDOUT,
    )
    nodes: List[ServerProcess] = []
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not etcd_healthy(client_port):
            if etcd.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    "etcd did not start: " + (work / "etcd.log").read_text(errors="replace"),
                    pytrace=False,
                )
            time.sleep(0.05)

        def node(name: str, roles: str) -> ServerProcess:
            return ServerProcess(
                work / name,
                listen=f"127.0.0.1:{free_port()}",
                args=[
                    "--etcd", f"127.0.0.1:{client_port}",
                    "--deep-storage", str(work / "deep"),
                    "--node-id", name,
                    "--roles", roles,
                    "--rpc-listen", f"127.0.0.1:{free_port()}",
                    "--lease-ttl-s", "2",
                ],
            )

        nodes.append(node("data", "coordinator,ingest,data"))
        leader = pufferdb.connect(nodes[0].url, timeout=30.0)
        deadline = time.monotonic() + START_TIMEOUT_S
        while leader._json("GET", "/v1/admin/cluster").get("leads_ingest") is not True:
            if time.monotonic() > deadline:
                pytest.fail("the data node did not become the ingest leader", pytrace=False)
            time.sleep(0.05)
        nodes.append(node("broker", "broker"))
        yield nodes[1].url
    finally:
        for process in reversed(nodes):
            process.stop()
        etcd.kill()
        etcd.wait()
        etcd_log.close()


def test_the_client_talks_to_a_broker_as_to_one_node(broker: str) -> None:
    client = pufferdb.connect(broker, timeout=30.0)
    status = client._json("GET", "/v1/admin/cluster")
    assert status["mode"] == "cluster" and status["published"] == 0, status
    table = client.create_table("people", key=KEY, attributes=SCHEMA)
    oracle = load(table, random.Random(20261124))
    # Reads see the writes made through the broker (it waits for the data node).
    for key in sorted(oracle.state)[:50]:
        assert table.get(key) == oracle.state[key]
    for where in [{"all": True}, {"eq": {"city": "Lisbon"}}, {"range": {"age": {"gte": 40}}}]:
        expected = oracle.select(where)
        result = table.search(where=where)
        assert keys(result.rows) == keys(expected), where
        assert result.rows == expected, where
        assert table.count(where=where) == len(expected), where
    counted = client.sql("SELECT COUNT(*) FROM people WHERE city = 'Porto'")
    assert counted.count == len(oracle.select({"eq": {"city": "Porto"}}))
    assert table.get("no such key") is None
    with pytest.raises(pufferdb.Conflict):
        client.create_table("people", key=KEY, attributes=SCHEMA)
