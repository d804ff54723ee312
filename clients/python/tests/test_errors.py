"""Typed errors: each status maps to its class, with code, message, retryable, status."""

from __future__ import annotations

import socket

import pytest

import pufferdb
from _support import KEY, SCHEMA


@pytest.fixture(scope="module")
def small(client: pufferdb.Client) -> pufferdb.Table:
    table = client.create_table("small", KEY, SCHEMA)
    table.put([{KEY: f"s{i}", "age": i, "city": "Porto"} for i in range(10)])
    return table


def test_unknown_table_is_not_found(client: pufferdb.Client) -> None:
    ghost = client.table("ghost")
    calls = [
        lambda: ghost.get("x"),
        lambda: ghost.search(city="Boston"),
        lambda: ghost.count(),
        lambda: ghost.put({KEY: "x"}),
        lambda: ghost.delete("x"),
        ghost.describe,
        lambda: client.sql("SELECT * FROM ghost"),
        lambda: client.drop_table("ghost"),
    ]
    for call in calls:
        with pytest.raises(pufferdb.NotFound) as caught:
            call()
        error = caught.value
        assert error.code == "unknown_table"
        assert error.status == 404
        assert error.retryable is False
        assert "ghost" in error.message
        assert isinstance(error, pufferdb.PufferError)
    client.drop_table("ghost", missing_ok=True)


@pytest.mark.parametrize(
    "query,codes",
    [
        ("SELEKT * FROM small", {"syntax_error"}),
        ("UPDATE small SET age = 1", {"unsupported"}),
        ("SELECT no_such_function(age) FROM small GROUP BY age", {"invalid_request"}),
        ("SELECT * FROM small WHERE", {"syntax_error"}),
    ],
)
def test_bad_sql_is_bad_request(client: pufferdb.Client, small: pufferdb.Table, query: str, codes: set) -> None:
    with pytest.raises(pufferdb.BadRequest) as caught:
        client.sql(query)
    assert caught.value.code in codes
    assert caught.value.status == 400
    assert caught.value.message


def test_wrong_type_rejects_the_whole_batch(small: pufferdb.Table) -> None:
    before = small.search().rows
    batch = [
        {KEY: "new1", "age": 1},
        {KEY: "s3", "age": 333},
        {KEY: "new2", "age": "not a number"},
        {KEY: "new3", "age": 3},
    ]
    with pytest.raises(pufferdb.BadRequest) as caught:
        small.put(batch)
    assert caught.value.code in {"invalid_request", "invalid_record"}
    assert "age" in caught.value.message
    assert small.search().rows == before
    assert small.get("new1") is None and small.get("new3") is None
    assert small.get("s3") == {KEY: "s3", "age": 3, "city": "Porto"}


@pytest.mark.parametrize(
    "record",
    [
        {KEY: "x", "unknown_column": 1},
        {"no_key": "x", "age": 1},
        {KEY: 17, "age": 1},
        {KEY: "x", "active": "yes"},
        {KEY: "x", "joined": "not a date"},
        {KEY: "x", "score": "1.5"},
    ],
)
def test_invalid_records_are_bad_requests(small: pufferdb.Table, record: dict) -> None:
    before = small.count()
    with pytest.raises(pufferdb.BadRequest):
        small.put([{KEY: "fine", "age": 5}, record])
    assert small.count() == before
    assert small.get("fine") is None


def test_empty_batch_is_bad_request(small: pufferdb.Table) -> None:
    with pytest.raises(pufferdb.BadRequest):
        small.put([])


@pytest.mark.parametrize(
    "where",
    [
        {"eq": {"age": "ten"}},
        {"eq": {"nope": 1}},
        {"prefix": {"age": "1"}},
        {"frobnicate": {"age": 1}},
        {"range": {"age": {"around": 3}}},
        {"eq": {"age": 1}, "exists": "age"},
    ],
)
def test_invalid_predicates_are_bad_requests(small: pufferdb.Table, where: dict) -> None:
    with pytest.raises(pufferdb.BadRequest):
        small.search(where=where)


def test_limits_are_too_large(small: pufferdb.Table) -> None:
    with pytest.raises(pufferdb.TooLarge) as caught:
        small.search(limit=10_000_000)
    assert caught.value.code == "limit_exceeded"
    assert caught.value.status == 413


def test_bad_freshness_is_bad_request(small: pufferdb.Table) -> None:
    with pytest.raises(pufferdb.BadRequest):
        small.count(freshness_s=-1)


def test_no_server_is_connection_failed() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # Nothing listens on the port now.
    db = pufferdb.connect(f"http://127.0.0.1:{port}", timeout=5)
    with pytest.raises(pufferdb.ConnectionFailed) as caught:
        db.tables()
    assert caught.value.status is None
    assert caught.value.retryable is True


def test_error_classes_by_status() -> None:
    from pufferdb.errors import error_for_status

    cases = {
        400: pufferdb.BadRequest,
        401: pufferdb.Unauthorized,
        403: pufferdb.Forbidden,
        404: pufferdb.NotFound,
        409: pufferdb.Conflict,
        413: pufferdb.TooLarge,
        429: pufferdb.Overloaded,
        503: pufferdb.Overloaded,
        500: pufferdb.ServerError,
        502: pufferdb.ServerError,
    }
    for status, cls in cases.items():
        error = error_for_status(status, {"code": "c", "message": "m", "retryable": False}, 1.0)
        assert type(error) is cls
        assert (error.code, error.message, error.status) == ("c", "m", status)
        assert error.retryable is (cls is pufferdb.Overloaded)
    assert error_for_status(429, None, 2.0).retry_after == 2.0
    assert error_for_status(418, None).code == "http_418"
