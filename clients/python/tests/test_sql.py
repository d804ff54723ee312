"""SQL: SELECT, COUNT(*), FRESHNESS, INSERT/DELETE, SHOW TABLES, DESCRIBE, results."""

from __future__ import annotations

import datetime as dt
import random
import time
from typing import Tuple

import pytest

import pufferdb
from _support import KEY, SCHEMA, Oracle, keys, load, ts_micros

Loaded = Tuple[pufferdb.Table, Oracle]


@pytest.fixture(scope="module")
def trips(client: pufferdb.Client) -> Loaded:
    table = client.create_table("trips", key=KEY, attributes=SCHEMA)
    return table, load(table, random.Random(99), total=500, batches=4)


SELECTS = [
    (
        "SELECT * FROM trips WHERE city = 'Boston'",
        {"eq": {"city": "Boston"}},
    ),
    (
        "SELECT * FROM trips WHERE age >= 30 AND age < 45 AND active = true",
        {"and": [{"range": {"age": {"gte": 30, "lt": 45}}}, {"eq": {"active": True}}]},
    ),
    (
        "SELECT * FROM trips WHERE city IN ('Porto', 'Kyoto') OR score > 90",
        {"or": [{"in": {"city": ["Porto", "Kyoto"]}}, {"range": {"score": {"gt": 90}}}]},
    ),
    (
        "SELECT * FROM trips WHERE name LIKE 'Eva%'",
        {"prefix": {"name": "Eva"}},
    ),
    (
        "SELECT * FROM trips WHERE name LIKE '%ra%' AND age BETWEEN 20 AND 60",
        {"and": [{"contains": {"name": "ra"}}, {"range": {"age": {"gte": 20, "lte": 60}}}]},
    ),
    (
        "SELECT * FROM trips WHERE joined IS NOT NULL AND score <= -40",
        {"and": [{"exists": "joined"}, {"range": {"score": {"lte": -40}}}]},
    ),
]


@pytest.mark.parametrize("query,where", SELECTS, ids=[str(i) for i in range(len(SELECTS))])
def test_select_matches_oracle(client: pufferdb.Client, trips: Loaded, query: str, where: dict) -> None:
    _, oracle = trips
    expected = oracle.select(where)
    result = client.sql(query)
    assert result.kind == "rows"
    assert result.rows == expected
    assert result.columns == [KEY] + list(SCHEMA)
    assert result.truncated is False
    # SCUs are numbered per database: other tables' writes may follow this one's.
    assert result.snapshot["seq"] >= oracle.last_seq
    count = client.sql(query.replace("SELECT *", "SELECT COUNT(*)", 1))
    assert count.kind == "count"
    assert count.count == len(expected)


def test_select_columns_and_limit(client: pufferdb.Client, trips: Loaded) -> None:
    _, oracle = trips
    result = client.sql("SELECT name, age FROM trips WHERE city = 'Lisbon' LIMIT 5")
    expected = [
        {c: v for c, v in r.items() if c in (KEY, "name", "age")}
        for r in oracle.select({"eq": {"city": "Lisbon"}})
    ]
    assert result.columns == ["name", "age"]
    # LIMIT returns any 5 matches (not necessarily the smallest keys), sorted by key.
    assert keys(result.rows) == sorted(keys(result.rows))
    assert len(result.rows) == min(5, len(expected))
    assert all(row in expected for row in result.rows)
    assert result.truncated is (len(expected) > 5)


def test_count_with_freshness_clause_and_parameter(client: pufferdb.Client, trips: Loaded) -> None:
    _, oracle = trips
    where = {"range": {"age": {"gt": 50}}}
    for query, freshness in [
        ("SELECT COUNT(*) FROM trips WHERE age > 50 FRESHNESS 3600", None),
        ("SELECT COUNT(*) FROM trips WHERE age > 50", 3600),
        ("SELECT COUNT(*) FROM trips WHERE age > 50 FRESHNESS 0", None),
    ]:
        result = client.sql(query, freshness_s=freshness)
        seq = result.snapshot["seq"]
        assert seq >= 0  # numbered per database; oracle.at(seq) holds every SCU up to it
        assert result.count == len(oracle.select(where, oracle.at(seq))), query
    rows = client.sql("SELECT * FROM trips WHERE age > 50 FRESHNESS 10")
    assert rows.rows == oracle.select(where, oracle.at(rows.snapshot["seq"]))


def test_freshness_bound_makes_old_writes_visible(client: pufferdb.Client, trips: Loaded) -> None:
    _, oracle = trips
    time.sleep(1.2)  # every SCU of the fixture is now more than 1 s old
    result = client.sql("SELECT COUNT(*) FROM trips FRESHNESS 1")
    assert result.snapshot["seq"] >= oracle.last_seq
    assert result.count == len(oracle.state)
    assert client.table("trips").count(freshness_s=1) == len(oracle.state)


def test_insert_and_delete_statements(client: pufferdb.Client) -> None:
    client.sql("CREATE TABLE notes (id STRING, body STRING, n INT, PRIMARY KEY (id))")
    assert "notes" in client.tables()
    written = client.sql("INSERT INTO notes (id, body, n) VALUES ('a', 'first', 1), ('b', 'second', 2)")
    assert written.kind == "write"
    assert written.seq >= 1 and written.operations == 2
    notes = client.table("notes")
    assert notes.get("a") == {"id": "a", "body": "first", "n": 1}
    deleted = client.sql("DELETE FROM notes WHERE id = 'a'")
    assert deleted.seq > written.seq
    assert notes.get("a") is None
    assert client.sql("SELECT COUNT(*) FROM notes").count == 1
    described = client.sql("DESCRIBE notes")
    assert described.raw["key"] == "id"
    assert [a["name"] for a in described.raw["attributes"]] == ["body", "n"]
    shown = client.sql("SHOW TABLES")
    assert shown.kind == "tables" and "notes" in shown.tables
    dropped = client.sql("DROP TABLE notes")
    assert dropped.kind == "ok"
    assert "notes" not in client.tables()


def test_result_protocol(client: pufferdb.Client, trips: Loaded) -> None:
    _, oracle = trips
    result = client.sql("SELECT * FROM trips LIMIT 3")
    assert len(result) == 3 and bool(result)
    assert result[0] == oracle.state[result[0][KEY]]
    assert [row[KEY] for row in result] == sorted(row[KEY] for row in result.rows)
    assert "3 rows" in repr(result)
    empty = client.sql("SELECT * FROM trips WHERE city = 'Atlantis'")
    assert len(empty) == 0 and not empty
    count = client.sql("SELECT COUNT(*) FROM trips")
    with pytest.raises(TypeError):
        len(count)
    with pytest.raises(TypeError):
        iter(count)


def test_to_pandas(client: pufferdb.Client, trips: Loaded) -> None:
    pandas = pytest.importorskip("pandas")
    _, oracle = trips
    result = client.sql("SELECT * FROM trips WHERE city = 'Porto'")
    frame = result.to_pandas()
    assert isinstance(frame, pandas.DataFrame)
    assert list(frame.columns) == [KEY] + list(SCHEMA)
    assert list(frame[KEY]) == [r[KEY] for r in oracle.select({"eq": {"city": "Porto"}})]
    projected = client.sql("SELECT age FROM trips WHERE city = 'Porto'").to_pandas()
    assert list(projected.columns) == ["age", KEY]
    assert len(projected) == len(frame)


def test_analytics_queries_match_the_oracle(client: pufferdb.Client, trips: Loaded) -> None:
    """GROUP BY, aggregates and ORDER BY ... LIMIT (run by DataFusion on the server)."""
    _, oracle = trips
    rows = list(oracle.state.values())
    answer = client.sql("SELECT city, COUNT(*) AS n, MAX(age) AS oldest FROM trips GROUP BY city")
    assert answer.kind == "rows"
    assert answer.columns == ["city", "n", "oldest"]
    expected = {}
    for row in rows:
        city = row.get("city")
        n, oldest = expected.get(city, (0, None))
        age = row.get("age")
        if age is not None and (oldest is None or age > oldest):
            oldest = age
        expected[city] = (n + 1, oldest)
    got = {r["city"]: (r["n"], r["oldest"]) for r in answer.rows}
    assert got == expected
    assert answer.snapshot["seq"] >= oracle.last_seq  # other tables may have been written since

    scored = sorted((r for r in rows if r.get("score") is not None), key=lambda r: (-r["score"], r[KEY]))
    answer = client.sql(f"SELECT {KEY}, score FROM trips WHERE score IS NOT NULL ORDER BY score DESC, {KEY} LIMIT 5")
    assert [r[KEY] for r in answer.rows] == [r[KEY] for r in scored[:5]]


def test_arrow_answers_equal_json_answers(client: pufferdb.Client, trips: Loaded) -> None:
    """The same selects as an Arrow IPC stream (pyarrow) and as JSON: the same columns and
    rows (timestamps compared as microseconds), through the subset's path and DataFusion's,
    and ``to_pandas()`` converting the Arrow table."""
    pyarrow = pytest.importorskip("pyarrow")
    pandas = pytest.importorskip("pandas")
    _, oracle = trips
    queries = [
        "SELECT * FROM trips WHERE city = 'Porto'",
        "SELECT city, COUNT(*) AS n, MAX(age) AS oldest, MIN(joined) AS first FROM trips GROUP BY city",
        f"SELECT {KEY}, score, active FROM trips WHERE score IS NOT NULL ORDER BY score DESC, {KEY} LIMIT 7",
    ]
    for query in queries:
        as_json = client.sql(query)
        as_arrow = client.sql(query, format="arrow")
        assert isinstance(as_arrow.arrow, pyarrow.Table), query
        assert as_arrow.columns == as_json.columns, query
        assert as_arrow.snapshot["seq"] >= oracle.last_seq, query

        def micros(value: object) -> object:
            looks_like_time = isinstance(value, str) and value[:4].isdigit() and "T" in value
            if isinstance(value, dt.datetime) or looks_like_time:
                return ts_micros(value)
            return value

        def plain(rows: list) -> list:
            out = [{c: micros(r.get(c)) for c in as_json.columns} for r in rows]
            return out if "ORDER BY" in query else sorted(out, key=repr)

        assert plain(as_arrow.rows) == plain(as_json.rows), query
        frame = as_arrow.to_pandas()
        assert isinstance(frame, pandas.DataFrame)
        assert list(frame.columns) == as_json.columns
        assert len(frame) == len(as_json.rows)
    # Answers other than rows stay JSON.
    count = client.sql("SELECT COUNT(*) FROM trips", format="arrow")
    assert count.kind == "count" and count.count == len(oracle.state)
    with pytest.raises(ValueError):
        client.sql("SELECT * FROM trips", format="parquet")


def test_to_pandas_reads_arrow_when_pyarrow_is_installed_and_json_otherwise(
    client: pufferdb.Client, trips: Loaded, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Client.to_pandas`` asks for Arrow when pyarrow imports (typed columns, as
    ``format="arrow"`` gives them) and for JSON when it does not; both frames hold the
    rows of the JSON answer."""
    pandas = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    from pufferdb import client as client_module

    query = f"SELECT {KEY}, city, age, joined FROM trips WHERE city = 'Porto' ORDER BY {KEY}"
    expected = client.sql(query)
    asked: list = []
    real_sql = client.sql

    def recording_sql(*args: object, **kwargs: object) -> object:
        asked.append(kwargs.get("format"))
        return real_sql(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(client, "sql", recording_sql)
    with_arrow = client.to_pandas(query)
    assert asked == ["arrow"]
    assert isinstance(with_arrow, pandas.DataFrame)
    assert list(with_arrow.columns) == expected.columns
    assert list(with_arrow[KEY]) == [r[KEY] for r in expected.rows]
    assert str(with_arrow["joined"].dtype).startswith("datetime64")

    def no_pyarrow() -> object:
        raise ImportError("Arrow answers need pyarrow: pip install pyarrow")

    monkeypatch.setattr(client_module, "_import_pyarrow", no_pyarrow)
    without = client.to_pandas(query)
    assert asked == ["arrow", "json"]
    assert list(without[KEY]) == list(with_arrow[KEY])
    assert list(without["age"].dropna()) == list(with_arrow["age"].dropna())
    with pytest.raises(TypeError):
        client.to_pandas("SELECT COUNT(*) FROM trips WHERE city = 'Porto'")
