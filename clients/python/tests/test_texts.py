"""Texts: upload, then count/search/range/wildcard/extract against Python's own find,
comparisons and slicing."""

from __future__ import annotations

import random
from typing import List, Tuple

import pytest

import pufferdb

WORDS = ["puffer", "fish", "sea", "reef", "coral", "ação", "über", "naïve", "aaa", "a", "ab"]


def occurrences(data: bytes, pattern: bytes) -> List[int]:
    """Every (overlapping) occurrence of `pattern` in `data`, ascending."""
    found, start = [], data.find(pattern)
    while start != -1:
        found.append(start)
        start = data.find(pattern, start + 1)
    return found


def naive_range(data: bytes, lo: bytes, hi: bytes) -> List[int]:
    """Every offset whose suffix is >= lo and whose first len(hi) bytes are <= hi.
    Comparing the suffix's first len(lo) bytes with lo decides suffix >= lo (a shorter
    slice is a proper prefix of lo, so smaller), without copying every suffix."""
    return [
        j for j in range(len(data)) if data[j : j + len(lo)] >= lo and data[j : j + len(hi)] <= hi
    ]


def naive_wildcard(data: bytes, prefix: bytes, suffix: bytes, max_gap: int) -> List[Tuple[int, int]]:
    """(start, length) of prefix, then 0..max_gap bytes, then suffix: every gap after
    every prefix occurrence, which is (start, length) order."""
    found = []
    for start in occurrences(data, prefix):
        end = start + len(prefix)
        for gap in range(max_gap + 1):
            if data.startswith(suffix, end + gap):
                found.append((start, end + gap + len(suffix) - start))
    return found


@pytest.fixture(scope="module")
def corpus(client: pufferdb.Client) -> Tuple[pufferdb.Text, bytes]:
    rng = random.Random(4242)
    lines = []
    for i in range(2000):
        lines.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12))) + f" #{i}")
    data = ("\n".join(lines) + "\n").encode("utf-8")
    text = client.text("corpus")
    answer = text.upload(data)
    assert answer["name"] == "corpus"
    assert answer["bytes"] == len(data)
    assert answer["index_bytes"] > 0
    return text, data


PATTERNS = ["puffer", "fish\nsea", "aa", "aaa a", "ação", "über reef", "#1999\n", "zebra", "\n", "ab a"]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_count_and_search(corpus: Tuple[pufferdb.Text, bytes], pattern: str) -> None:
    text, data = corpus
    expected = occurrences(data, pattern.encode("utf-8"))
    assert text.count(pattern) == len(expected)
    assert text.count(pattern.encode("utf-8")) == len(expected)
    assert text.search(pattern, limit=len(expected) + 5) == expected
    assert text.search(pattern, limit=3) == expected[:3]
    if len(expected) <= 100_000:
        assert text.search(pattern) == expected


RANGES = [
    ("a", "b"),
    ("fish", "puffer"),
    ("puffer", "fish"),
    ("sea", "sea"),
    ("sea reef", "sea"),
    ("ação", "ação"),
    ("über", "übf"),
    ("#19", "#2"),
    ("", "#1"),
    ("reef", ""),
    ("zebra", "zz"),
    ("\n", "\n#"),
]


@pytest.mark.parametrize("lo,hi", RANGES)
def test_range(corpus: Tuple[pufferdb.Text, bytes], lo: str, hi: str) -> None:
    text, data = corpus
    expected = naive_range(data, lo.encode("utf-8"), hi.encode("utf-8"))
    assert text.range(lo, hi, limit=3) == expected[:3]
    assert text.range(lo.encode("utf-8"), hi.encode("utf-8"), limit=len(expected) + 1) == expected
    if len(expected) <= 100_000:
        assert text.range(lo, hi) == expected


WILDCARDS = [
    ("puffer", "fish", 0),
    ("puffer", "fish", 1),
    ("sea", "reef", 30),
    ("ação", "a", 2),
    ("#1", "\n", 3),
    ("aaa", "aa", 0),
    ("über", "naïve", 12),
    ("zebra", "a", 5),
    ("fish", "zebra", 50),
]


@pytest.mark.parametrize("prefix,suffix,max_gap", WILDCARDS)
def test_wildcard(corpus: Tuple[pufferdb.Text, bytes], prefix: str, suffix: str, max_gap: int) -> None:
    text, data = corpus
    expected = naive_wildcard(data, prefix.encode("utf-8"), suffix.encode("utf-8"), max_gap)
    assert text.wildcard(prefix, suffix, max_gap) == expected
    assert text.wildcard(prefix.encode("utf-8"), suffix, max_gap, limit=2) == expected[:2]
    assert text.wildcard(prefix, suffix, max_gap=max_gap, limit=0) == []


def test_range_and_wildcard_refusals(corpus: Tuple[pufferdb.Text, bytes]) -> None:
    text, _ = corpus
    with pytest.raises(pufferdb.TooLarge):
        text.range("a", "b", limit=100_001)
    with pytest.raises(pufferdb.TooLarge):
        text.wildcard("puffer", "fish", 1, limit=100_001)
    with pytest.raises(pufferdb.TooLarge):
        text.range("x" * 5000, "y")
    for bad_gap in (-1, 1.5, "two"):
        with pytest.raises(pufferdb.BadRequest) as caught:
            text.wildcard("puffer", "fish", bad_gap)  # type: ignore[arg-type]
        assert "max_gap" in str(caught.value)
    with pytest.raises(pufferdb.BadRequest):
        text.wildcard("", "fish", 1)
    with pytest.raises(ValueError):
        text.range(b"\xff", b"")
    with pytest.raises(ValueError):
        text.wildcard("a", b"ab\xc3", 1)


def test_count_is_overlapping(corpus: Tuple[pufferdb.Text, bytes]) -> None:
    text, data = corpus
    # Python's bytes.count does not count overlaps; the index does.
    assert text.count("aa") == len(occurrences(data, b"aa")) >= data.count(b"aa")


def test_extract_matches_slices(corpus: Tuple[pufferdb.Text, bytes]) -> None:
    text, data = corpus
    rng = random.Random(5)
    cases = [(0, 10), (0, len(data)), (len(data) - 5, 5), (len(data) - 3, 10), (123, 0)]
    cases += [(rng.randrange(len(data)), rng.randint(1, 3000)) for _ in range(30)]
    for offset, length in cases:
        assert text.extract(offset, length) == data[offset : offset + length], (offset, length)
    for offset in occurrences(data, "ação".encode())[:5]:
        assert text.extract(offset, len("ação".encode())) == "ação".encode()


def test_upload_str_and_conflict(client: pufferdb.Client) -> None:
    body = "hello world, hello puffer"
    assert client.upload_text("greeting", body)["bytes"] == len(body.encode())
    greeting = client.text("greeting")
    assert greeting.count("hello") == 2
    assert greeting.search("hello") == [0, 13]
    assert greeting.extract(6, 5) == b"world"
    with pytest.raises(pufferdb.Conflict) as caught:
        greeting.upload(b"again")
    assert caught.value.code == "text_exists"


def test_unknown_text_is_not_found(client: pufferdb.Client) -> None:
    missing = client.text("missing_text")
    calls = (
        lambda: missing.count("x"),
        lambda: missing.search("x"),
        lambda: missing.range("x", "y"),
        lambda: missing.wildcard("x", "y", 1),
        lambda: missing.extract(0, 1),
    )
    for call in calls:
        with pytest.raises(pufferdb.NotFound) as caught:
            call()
        assert caught.value.code == "unknown_text"


def test_bad_text_name_is_bad_request(client: pufferdb.Client) -> None:
    with pytest.raises(pufferdb.BadRequest):
        client.upload_text("9 bad name", b"x")


def test_long_pattern_is_too_large(corpus: Tuple[pufferdb.Text, bytes]) -> None:
    text, _ = corpus
    with pytest.raises(pufferdb.TooLarge):
        text.count("x" * 5000)


def test_non_utf8_pattern_is_refused_locally(corpus: Tuple[pufferdb.Text, bytes]) -> None:
    text, _ = corpus
    with pytest.raises(ValueError):
        text.count(b"\xff")
    with pytest.raises(ValueError):
        text.search(b"ab\xc3")
