"""Generated records and a Python oracle for them: the records a test wrote, kept per
SCU sequence number, and predicates evaluated in Python with the server's semantics
(docs/http.md): a condition on an attribute is false on a record that lacks it, `not`
is plain negation, strings compare by bytes, results come sorted by key."""

from __future__ import annotations

import datetime as dt
import random
from typing import Any, Dict, Iterable, List, Optional, Tuple

import pufferdb

UTC = dt.timezone.utc
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)

SCHEMA: Dict[str, str] = {
    "name": "string",
    "city": "string",
    "age": "int",
    "score": "float",
    "active": "bool",
    "joined": "timestamp",
}
KEY = "id"

CITIES = ["Boston", "Lisbon", "Porto", "New York", "Zürich", "São Paulo", "Berlin", "Kyoto"]
FIRST = ["Ana", "Bruno", "Carla", "Diogo", "Eva", "Filipa", "Gustavo", "Helena", "Ivo", "Joana"]
LAST = ["Silva", "Santos", "Costa", "Pereira", "Oliveira", "Smith", "Müller", "Tanaka"]
# Keys that need percent-encoding in a URL path.
ODD_KEYS = ["odd/key 1", "odd?key&2", "odd#key%3", "odd+é", "odd;key..5"]


def ts_text(micros: int) -> str:
    """The server's RFC 3339 output for a timestamp in microseconds."""
    moment = EPOCH + dt.timedelta(microseconds=micros)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if micros % 1_000_000:
        text += f".{micros % 1_000_000:06d}"
    return text + "Z"


def ts_micros(value: Any) -> int:
    """Microseconds of a timestamp given as the server outputs or the client sends it."""
    if isinstance(value, int):
        return value
    if isinstance(value, dt.datetime):
        delta = value - EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    text = str(value)
    if len(text) == 10:
        text += "T00:00:00Z"
    moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return ts_micros(moment)


def generate(rng: random.Random, count: int, start: int = 0) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """`count` records as sent (timestamps as datetimes, date strings or integers;
    absent attributes omitted or None) and as the server returns them."""
    sent: List[Dict[str, Any]] = []
    expected: List[Dict[str, Any]] = []
    for i in range(start, start + count):
        key = ODD_KEYS[i % len(ODD_KEYS)] + f"-{i}" if i % 53 == 7 else f"u{i:05d}"
        values: Dict[str, Any] = {
            "name": f"{rng.choice(FIRST)} {rng.choice(LAST)}",
            "city": rng.choice(CITIES),
            "age": rng.randint(18, 90),
            "score": round(rng.uniform(-50.0, 100.0), 3),
            "active": rng.random() < 0.5,
        }
        day = rng.randint(0, 20_000)
        seconds = rng.randint(0, 86_399)
        micros = (day * 86_400 + seconds) * 1_000_000
        form = rng.randrange(3)
        if form == 0:
            values["joined"] = EPOCH + dt.timedelta(microseconds=micros)
        elif form == 1:
            micros = day * 86_400 * 1_000_000
            values["joined"] = (EPOCH + dt.timedelta(days=day)).strftime("%Y-%m-%d")
        else:
            values["joined"] = micros
        joined_micros = micros
        record: Dict[str, Any] = {KEY: key}
        shown: Dict[str, Any] = {KEY: key}
        for column, value in values.items():
            roll = rng.random()
            if roll < 0.08:
                continue  # omitted: absent
            if roll < 0.12:
                record[column] = None  # null: absent
                continue
            record[column] = value
            shown[column] = ts_text(joined_micros) if column == "joined" else value
        sent.append(record)
        expected.append(shown)
    return sent, expected


class Oracle:
    """The table's contents as the test wrote them, after each SCU."""

    def __init__(self) -> None:
        self.history: List[Tuple[int, Dict[str, Dict[str, Any]]]] = [(0, {})]

    @property
    def state(self) -> Dict[str, Dict[str, Any]]:
        return self.history[-1][1]

    @property
    def last_seq(self) -> int:
        return self.history[-1][0]

    def at(self, seq: int) -> Dict[str, Dict[str, Any]]:
        """The contents with every SCU up to `seq` applied."""
        found = self.history[0][1]
        for applied, state in self.history:
            if applied <= seq:
                found = state
        return found

    def put(self, seq: int, records: Iterable[Dict[str, Any]]) -> None:
        state = dict(self.state)
        for record in records:
            state[record[KEY]] = dict(record)
        self.history.append((seq, state))

    def delete(self, seq: int, key: str) -> None:
        state = dict(self.state)
        state.pop(key, None)
        self.history.append((seq, state))

    def select(
        self, predicate: Optional[Dict[str, Any]], state: Optional[Dict[str, Dict[str, Any]]] = None
    ) -> List[Dict[str, Any]]:
        """Matching records sorted by key (UTF-8 bytes order = code point order)."""
        state = self.state if state is None else state
        return [
            state[k]
            for k in sorted(state)
            if predicate is None or matches(predicate, state[k])
        ]


def _typed(column: str, value: Any) -> Any:
    if SCHEMA.get(column) == "timestamp":
        return ts_micros(value)
    if SCHEMA.get(column) == "float":
        return float(value)
    return value


def matches(predicate: Dict[str, Any], record: Dict[str, Any]) -> bool:
    """Evaluates a JSON predicate on a record as the server returns it."""
    ((operator, argument),) = predicate.items()
    if operator == "all":
        return True
    if operator == "and":
        return all(matches(p, record) for p in argument)
    if operator == "or":
        return any(matches(p, record) for p in argument)
    if operator == "not":
        return not matches(argument, record)
    if operator == "exists":
        return argument in record
    if operator == "text_contains":
        return any(
            isinstance(v, str) and argument in v
            for c, v in record.items()
            if c != KEY and SCHEMA.get(c) == "string"
        )
    ((column, operand),) = argument.items()
    if column not in record:
        return False
    value = _typed(column, record[column])
    if operator == "eq":
        return value == _typed(column, operand)
    if operator == "in":
        return any(value == _typed(column, v) for v in operand)
    if operator == "prefix":
        return value.startswith(operand)
    if operator == "suffix":
        return value.endswith(operand)
    if operator == "contains":
        return operand in value
    if operator == "range":
        ok = True
        for bound, limit in operand.items():
            limit = _typed(column, limit)
            ok = ok and {
                "gt": value > limit,
                "gte": value >= limit,
                "lt": value < limit,
                "lte": value <= limit,
            }[bound]
        return ok
    raise ValueError(f"unknown operator {operator}")


def load(
    table: pufferdb.Table, rng: random.Random, total: int = 500, batches: int = 5
) -> Oracle:
    """Puts `total` generated records in `batches` SCUs, the last batch rewriting some
    earlier keys; returns the oracle."""
    oracle = Oracle()
    per = total // batches
    for b in range(batches):
        sent, shown = generate(rng, per, start=b * per)
        if b == batches - 1:
            # Rewrite 20 earlier records (a put replaces the whole record).
            again_sent, again_shown = generate(rng, 20, start=0)
            sent += again_sent
            shown += again_shown
        seq = table.put(sent)
        assert seq > oracle.last_seq
        oracle.put(seq, shown)
    return oracle


def keys(rows: Iterable[Dict[str, Any]]) -> List[str]:
    return [row[KEY] for row in rows]

