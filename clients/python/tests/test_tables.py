"""Tables: put/get/search/count/describe against the Python oracle."""

from __future__ import annotations

import datetime as dt
import random
from typing import Any, Dict, Tuple

import pytest

import pufferdb
from _support import KEY, SCHEMA, Oracle, keys, load, matches, ts_text

Loaded = Tuple[pufferdb.Table, Oracle]


@pytest.fixture(scope="module")
def people(client: pufferdb.Client) -> Loaded:
    """Table `people`: 500 generated records in 5 SCUs (+20 rewrites). Read-only."""
    table = client.create_table("people", key=KEY, attributes=SCHEMA)
    oracle = load(table, random.Random(20240601))
    assert len(oracle.state) == 500
    return table, oracle


def test_create_describe_and_list(client: pufferdb.Client, people: Loaded) -> None:
    table, _ = people
    description = table.describe()
    assert description["name"] == "people"
    assert description["key"] == KEY
    assert description["attributes"] == [{"name": n, "type": t} for n, t in SCHEMA.items()]
    assert {"disk_bytes", "memory_bytes", "segments"} <= set(description["stats"])
    assert set(description["watermarks"]) == {"published", "sorted", "compressed"}
    assert "people" in client.tables()
    described = {d["name"]: d for d in client.tables(describe=True)}
    assert described["people"]["key"] == KEY


def test_create_existing_table_conflicts(client: pufferdb.Client, people: Loaded) -> None:
    with pytest.raises(pufferdb.Conflict) as caught:
        client.create_table("people", key=KEY, attributes=SCHEMA)
    assert caught.value.code == "table_exists"
    assert caught.value.status == 409
    # exist_ok returns a handle on the existing table.
    assert client.create_table("people", key=KEY, attributes=SCHEMA, exist_ok=True).name == "people"


def test_attribute_list_forms(client: pufferdb.Client) -> None:
    table = client.create_table(
        "forms", "k", [("a", "int"), {"name": "b", "type": "string"}]
    )
    assert [a["name"] for a in table.describe()["attributes"]] == ["a", "b"]
    client.drop_table("forms")
    assert "forms" not in client.tables()


def test_get_every_record_and_absent_keys(people: Loaded) -> None:
    table, oracle = people
    for key, record in oracle.state.items():
        assert table.get(key) == record, key
    for key in ["nope", "u99999", "u0000", "odd/key 1", "u00001 "]:
        assert table.get(key) is None
    assert table.get("u00003", freshness_s=3600) in (None, oracle.state["u00003"])


def test_put_replaces_whole_record(client: pufferdb.Client) -> None:
    table = client.create_table("replace", KEY, SCHEMA)
    first = table.put({KEY: "a", "name": "Ana", "age": 3, "joined": dt.date(2015, 7, 1)})
    assert table.get("a") == {KEY: "a", "name": "Ana", "age": 3, "joined": "2015-07-01T00:00:00Z"}
    second = table.put([{KEY: "a", "city": "Porto"}])
    assert second > first
    assert table.get("a") == {KEY: "a", "city": "Porto"}
    aware = dt.datetime(2015, 9, 12, 2, 46, 58, 771000, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    table.put({KEY: "b", "joined": aware, "score": 7})
    assert table.get("b") == {KEY: "b", "joined": "2015-09-12T00:46:58.771000Z", "score": 7.0}
    client.drop_table("replace")


EQUALS_CASES = [
    {"city": "Boston"},
    {"city": "Zürich"},
    {"active": True},
    {"city": "Lisbon", "active": False},
    {"age": 42},
    {"city": ["Porto", "São Paulo"]},
    {"city": None},
    {"name": "Ana Silva", "city": "Berlin"},
    {KEY: "u00010"},
]


def _equals_predicate(equals: Dict[str, Any]) -> Dict[str, Any]:
    parts = []
    for column, value in equals.items():
        if value is None:
            parts.append({"not": {"exists": column}})
        elif isinstance(value, list):
            parts.append({"in": {column: value}})
        else:
            parts.append({"eq": {column: value}})
    return {"and": parts}


@pytest.mark.parametrize("equals", EQUALS_CASES, ids=lambda e: ",".join(f"{k}={v}" for k, v in e.items()))
def test_search_keyword_equals(people: Loaded, equals: Dict[str, Any]) -> None:
    table, oracle = people
    expected = oracle.select(_equals_predicate(equals))
    result = table.search(**equals)
    assert result.rows == expected
    assert len(result) == len(expected)
    assert list(result) == expected
    assert result.truncated is False
    # SCUs are numbered per database: other tables' writes may follow this one's.
    assert result.snapshot["seq"] >= oracle.last_seq
    assert table.count(**equals) == len(expected)


WHERE_CASES = [
    {"all": True},
    {"eq": {"city": "Kyoto"}},
    {"eq": {"score": 0.5}},
    {"range": {"age": {"gte": 30, "lt": 40}}},
    {"range": {"age": {"gt": 85}}},
    {"range": {"score": {"gte": -10.5, "lte": 10.25}}},
    {"range": {"score": {"lt": 0}}},
    {"range": {"joined": {"gte": "2000-01-01", "lt": "2010-06-15T12:00:00Z"}}},
    {"range": {"joined": {"lte": 86_400_000_000 * 365}}},
    {"range": {KEY: {"gte": "u00100", "lt": "u00200"}}},
    {"range": {"name": {"gte": "Eva", "lte": "Helena Zzz"}}},
    {"range": {"active": {"gt": False}}},
    {"prefix": {"name": "Ca"}},
    {"prefix": {KEY: "odd"}},
    {"prefix": {"city": "S"}},
    {"suffix": {"name": "Santos"}},
    {"contains": {"name": "ri"}},
    {"contains": {"city": "ü"}},
    {"in": {"age": [18, 19, 20, 90]}},
    {"in": {"city": ["Boston", "Kyoto", "Nowhere"]}},
    {"exists": "joined"},
    {"not": {"exists": "score"}},
    {"text_contains": "o P"},
    {"and": [{"eq": {"city": "Porto"}}, {"range": {"age": {"gte": 50}}}]},
    {"or": [{"eq": {"city": "Porto"}}, {"prefix": {"name": "Joana"}}]},
    {"not": {"eq": {"city": "Boston"}}},
    {"not": {"range": {"age": {"lt": 60}}}},
    {
        "and": [
            {"or": [{"eq": {"active": True}}, {"not": {"exists": "active"}}]},
            {"not": {"in": {"city": ["Berlin", "Kyoto"]}}},
            {"range": {"score": {"gt": 25.0}}},
        ]
    },
    {"or": [{"and": [{"contains": {"name": "Silva"}}, {"eq": {"active": False}}]}, {"range": {"age": {"lte": 19}}}]},
    {"eq": {"city": "Atlantis"}},
]


@pytest.mark.parametrize("where", WHERE_CASES, ids=[str(i) for i in range(len(WHERE_CASES))])
def test_search_where(people: Loaded, where: Dict[str, Any]) -> None:
    table, oracle = people
    expected = oracle.select(where)
    result = table.search(where=where)
    assert keys(result.rows) == keys(expected), where
    assert result.rows == expected
    assert result.columns == [KEY] + list(SCHEMA)
    assert table.count(where=where) == len(expected)
    assert all(matches(where, row) for row in result)


def test_search_where_and_keywords_combine(people: Loaded) -> None:
    table, oracle = people
    where = {"range": {"age": {"gte": 40}}}
    expected = oracle.select({"and": [where, {"eq": {"city": "Lisbon"}}, {"eq": {"active": True}}]})
    assert table.search(where=where, city="Lisbon", active=True).rows == expected
    assert table.count(where, city="Lisbon", active=True) == len(expected)


def test_search_columns(people: Loaded) -> None:
    table, oracle = people
    result = table.search(city="Porto", columns=["name", "age"])
    assert result.columns == ["name", "age"]
    expected = [
        {c: v for c, v in r.items() if c in (KEY, "name", "age")}
        for r in oracle.select({"eq": {"city": "Porto"}})
    ]
    # The key comes with every row, even when not asked for.
    assert result.rows == expected


def _assert_limited(result: pufferdb.Result, expected: list, limit: int) -> None:
    """A limit returns *any* `limit` matches (docs/api.md), sorted by key."""
    got = keys(result.rows)
    assert got == sorted(got)
    assert len(got) == min(limit, len(expected))
    by_key = {r[KEY]: r for r in expected}
    assert all(by_key[row[KEY]] == row for row in result.rows)
    assert result.truncated is (len(expected) > limit)


def test_search_limit_and_truncated(people: Loaded) -> None:
    table, oracle = people
    everything = oracle.select(None)
    _assert_limited(table.search(limit=7), everything, 7)
    _assert_limited(table.search(limit=1), everything, 1)
    boston = oracle.select({"eq": {"city": "Boston"}})
    _assert_limited(table.search(city="Boston", limit=len(boston)), boston, len(boston))
    _assert_limited(table.search(city="Boston", limit=3), boston, 3)
    where = {"range": {"age": {"gte": 60}}}
    _assert_limited(table.search(where=where, limit=25), oracle.select(where), 25)
    big = table.search(limit=10_000)
    assert big.rows == everything and big.truncated is False
    assert table.search(limit=0).rows == []


def test_freshness_snapshot_matches_a_prefix_of_scus(people: Loaded) -> None:
    table, oracle = people
    where = {"range": {"age": {"lt": 50}}}
    for freshness in (0, 0.001, 5, 3600):
        result = table.search(where=where, freshness_s=freshness)
        seq = result.snapshot["seq"]
        assert seq >= 0  # numbered per database; oracle.at(seq) holds every SCU up to it
        assert result.rows == oracle.select(where, oracle.at(seq)), freshness
        assert isinstance(result.snapshot["age_ms"], (int, float))
        assert isinstance(result.snapshot["read_log"], bool)


def test_count_without_conditions(people: Loaded) -> None:
    table, oracle = people
    assert table.count() == len(oracle.state) == 500


def test_batch_over_tables_is_all_or_nothing(client: pufferdb.Client) -> None:
    left = client.create_table("batch_left", KEY, SCHEMA)
    right = client.create_table("batch_right", KEY, SCHEMA)
    seq = client.batch(
        [
            {"table": "batch_left", "put": {KEY: "a", "name": "Ana", "age": 3}},
            {"table": "batch_right", "put": {KEY: "a", "name": "Bo", "age": 4}},
            {"table": "batch_left", "put": {KEY: "b", "age": 5}},
        ]
    )
    assert left.get("a") == {KEY: "a", "name": "Ana", "age": 3}
    assert right.get("a") == {KEY: "a", "name": "Bo", "age": 4}
    assert left.get("b") == {KEY: "b", "age": 5}
    # One bad record in one table: nothing of the batch is applied, in either table.
    with pytest.raises(pufferdb.BadRequest):
        client.batch(
            [
                {"table": "batch_left", "delete": "a"},
                {"table": "batch_right", "put": {KEY: "c", "age": "not a number"}},
            ]
        )
    assert left.get("a") == {KEY: "a", "name": "Ana", "age": 3}
    assert right.get("c") is None
    later = client.batch([{"table": "batch_left", "delete": "a"}, {"table": "batch_right", "delete": "a"}])
    assert later > seq
    assert left.get("a") is None and right.get("a") is None
    assert left.get("b") == {KEY: "b", "age": 5}
    with pytest.raises(ValueError):
        client.batch([{"put": {KEY: "x"}}])
    client.drop_table("batch_left")
    client.drop_table("batch_right")


def test_delete_then_recheck(client: pufferdb.Client) -> None:
    table = client.create_table("deletions", KEY, SCHEMA)
    oracle = load(table, random.Random(7), total=200, batches=2)
    rng = random.Random(8)
    doomed = rng.sample(sorted(oracle.state), 40)
    for key in doomed:
        seq = table.delete(key)
        assert seq > oracle.last_seq
        oracle.delete(seq, key)
    # Deleting an absent key is one more (empty) SCU, not an error.
    seq = table.delete("never-there")
    oracle.delete(seq, "never-there")
    for key in doomed:
        assert table.get(key) is None
    for key, record in oracle.state.items():
        assert table.get(key) == record
    assert table.search().rows == oracle.select(None)
    where = {"or": [{"eq": {"city": "Boston"}}, {"range": {"age": {"gt": 70}}}]}
    assert table.search(where=where).rows == oracle.select(where)
    assert table.count() == 160
    # Put back one deleted record.
    record = {KEY: doomed[0], "name": "Back Again", "age": 33}
    oracle.put(table.put(record), [record])
    assert table.get(doomed[0]) == record
    assert table.count() == 161
    client.drop_table("deletions")
    with pytest.raises(pufferdb.NotFound):
        table.get(doomed[1])


def test_timestamps_in_predicates_accept_datetimes(people: Loaded) -> None:
    table, oracle = people
    low = dt.datetime(1995, 3, 1, tzinfo=dt.timezone.utc)
    where = {"range": {"joined": {"gte": low}}}
    expected = oracle.select({"range": {"joined": {"gte": ts_text(int(low.timestamp()) * 1_000_000)}}})
    assert table.search(where=where).rows == expected


def test_time_partitioned_table_reads_like_its_model(client: pufferdb.Client) -> None:
    """Records over three days in day chunks: counts by time range, by city and gets
    answer as a model of (day, key) -> record, the newest day's record for a key."""
    table = client.create_table(
        "edits",
        key="id",
        attributes={"ts": "timestamp", "city": "string"},
        partition_by=("ts", "day"),
    )
    rng = random.Random(7)
    start = dt.datetime(2015, 9, 11, tzinfo=dt.timezone.utc)
    model: Dict[Tuple[str, str], Dict[str, Any]] = {}
    for _ in range(4):
        batch = []
        for _ in range(40):
            key = f"e{rng.randrange(50)}"
            when = start + dt.timedelta(minutes=rng.randrange(3 * 24 * 60))
            record = {"id": key, "ts": when.isoformat(), "city": rng.choice(["Lisbon", "Porto"])}
            model[(when.date().isoformat(), key)] = {**record, "_when": when}
            batch.append(record)
        # The latest write of a (day, key) in a batch wins, as in the batch order.
        table.put(batch)
    description = table.describe()
    assert description["partition"]["granularity"] == "day"
    chunks = [name for name in client.tables() if name.startswith("edits__")]
    assert sorted(chunks) == sorted({f"edits__{day.replace('-', '')}" for day, _ in model})
    for day in ["2015-09-11", "2015-09-12", "2015-09-13"]:
        low = dt.datetime.fromisoformat(day).replace(tzinfo=dt.timezone.utc)
        where = {"range": {"ts": {"gte": low, "lt": low + dt.timedelta(days=1)}}}
        expected = sum(1 for (d, _) in model if d == day)
        assert table.count(where=where) == expected
        assert table.count(where=where, city="Porto") == sum(
            1 for (d, _), r in model.items() if d == day and r["city"] == "Porto"
        )
    for key in {k for _, k in model}:
        newest = max((r for (_, k), r in model.items() if k == key), key=lambda r: r["_when"].date())
        assert table.get(key)["city"] == newest["city"]
    client.drop_table("edits")
    assert not [name for name in client.tables() if name.startswith("edits")]
