"""Auth: a second server with admin, write and read tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

import pufferdb
from conftest import ServerProcess

ADMIN, WRITE, READ = "admin-secret", "write-secret", "read-secret"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(
        Path(tmp_path_factory.mktemp("puffer-auth")),
        env={
            "PUFFER_ADMIN_TOKEN": ADMIN,
            "PUFFER_WRITE_TOKEN": WRITE,
            "PUFFER_READ_TOKEN": READ,
        },
    )
    try:
        yield process
    finally:
        process.stop()


def test_roles(secured: ServerProcess) -> None:
    admin = pufferdb.connect(secured.url, token=ADMIN)
    writer = pufferdb.connect(secured.url, token=WRITE)
    reader = pufferdb.connect(secured.url, token=READ)
    anonymous = pufferdb.connect(secured.url)
    stranger = pufferdb.connect(secured.url, token="wrong")

    table = admin.create_table("vault", "id", {"v": "int"})
    table.put([{"id": "a", "v": 1}, {"id": "b", "v": 2}])

    # Reads work with any valid token.
    for db in (admin, writer, reader):
        assert db.table("vault").get("a") == {"id": "a", "v": 1}
        assert db.table("vault").count() == 2
        assert db.sql("SELECT COUNT(*) FROM vault").count == 2
        assert "vault" in db.tables()

    # The read token cannot write; nothing changes.
    with pytest.raises(pufferdb.Forbidden) as caught:
        reader.table("vault").put({"id": "c", "v": 3})
    assert caught.value.code == "forbidden" and caught.value.status == 403
    with pytest.raises(pufferdb.Forbidden):
        reader.table("vault").delete("a")
    with pytest.raises(pufferdb.Forbidden):
        reader.sql("INSERT INTO vault (id, v) VALUES ('c', 3)")
    assert admin.table("vault").get("c") is None
    assert admin.table("vault").get("a") == {"id": "a", "v": 1}

    # The write token writes records but cannot manage tables or texts.
    assert writer.table("vault").put({"id": "c", "v": 3}) > 0
    with pytest.raises(pufferdb.Forbidden):
        writer.create_table("other", "id")
    with pytest.raises(pufferdb.Forbidden):
        writer.drop_table("vault")
    with pytest.raises(pufferdb.Forbidden):
        writer.upload_text("notes", b"x")

    # No token, or an unknown one: unauthorized, for reads too.
    for db in (anonymous, stranger):
        with pytest.raises(pufferdb.Unauthorized) as caught:
            db.table("vault").get("a")
        assert caught.value.code == "unauthorized" and caught.value.status == 401
        with pytest.raises(pufferdb.Unauthorized):
            db.table("vault").put({"id": "d", "v": 4})
        with pytest.raises(pufferdb.Unauthorized):
            db.tables()
    assert admin.table("vault").count() == 3

    # /health needs no token.
    assert anonymous.health() == {"status": "ok"}
    assert anonymous.ready() is True
