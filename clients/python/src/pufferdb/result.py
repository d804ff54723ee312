"""The answer of a query: rows, a count, a write's sequence number, or another
statement's answer."""

from __future__ import annotations

import importlib
from typing import Any, Dict, Iterator, List, Optional

__all__ = ["Result"]


class Result:
    """The answer of :meth:`Client.sql`, :meth:`Table.search` or a count.

    Which attributes are set depends on the statement (:attr:`kind`):

    - ``"rows"`` (``SELECT`` and searches): :attr:`rows` (a list of dicts, sorted by
      key), :attr:`columns`, :attr:`truncated` (``True`` when a limit cut the answer)
      and :attr:`snapshot`. A result of rows iterates over its rows and has a ``len()``.
    - ``"count"`` (``SELECT COUNT(*)``): :attr:`count` and :attr:`snapshot`.
    - ``"write"`` (``INSERT``, ``DELETE``): :attr:`seq` (the SCU's sequence number) and
      :attr:`operations`.
    - ``"tables"`` (``SHOW TABLES``): :attr:`tables`.
    - ``"ok"`` (``CREATE TABLE``, ``DROP TABLE``) and ``"other"`` (``DESCRIBE``, ...):
      see :attr:`raw`.

    :attr:`snapshot` is ``{"seq": n, "age_ms": x, "read_log": b}``: every SCU up to
    ``seq`` is visible and none after it.
    """

    rows: List[Dict[str, Any]]
    columns: List[str]
    truncated: bool
    snapshot: Optional[Dict[str, Any]]
    count: Optional[int]
    seq: Optional[int]
    operations: Optional[int]
    tables: Optional[List[Any]]
    raw: Dict[str, Any]
    kind: str
    arrow: Any

    def __init__(self, raw: Dict[str, Any]) -> None:
        self.raw = raw
        self.arrow = None
        self.rows = list(raw.get("rows") or [])
        self.columns = list(raw.get("columns") or [])
        self.truncated = bool(raw.get("truncated", False))
        self.snapshot = raw.get("snapshot")
        self.count = raw.get("count")
        self.seq = raw.get("seq")
        self.operations = raw.get("operations")
        self.tables = raw.get("tables")
        if "rows" in raw:
            self.kind = "rows"
        elif "count" in raw:
            self.kind = "count"
        elif "seq" in raw:
            self.kind = "write"
        elif "tables" in raw:
            self.kind = "tables"
        elif raw.get("ok") is True:
            self.kind = "ok"
        else:
            self.kind = "other"

    @classmethod
    def from_arrow(cls, table: Any, snapshot: Dict[str, Any], truncated: bool) -> "Result":
        """A rows result from a ``pyarrow.Table`` (``Client.sql(..., format="arrow")``)."""
        result = cls(
            {
                "columns": list(table.column_names),
                "rows": [],
                "truncated": truncated,
                "snapshot": snapshot,
            }
        )
        result.rows = table.to_pylist()
        result.arrow = table
        return result

    def _need_rows(self) -> None:
        if self.kind != "rows":
            raise TypeError(
                f"this result holds no rows (it is a {self.kind!r} answer: {self.raw!r})"
            )

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        self._need_rows()
        return iter(self.rows)

    def __len__(self) -> int:
        self._need_rows()
        return len(self.rows)

    def __bool__(self) -> bool:
        return bool(self.rows) if self.kind == "rows" else True

    def __getitem__(self, index: int) -> Dict[str, Any]:
        self._need_rows()
        return self.rows[index]

    def __repr__(self) -> str:
        if self.kind == "rows":
            return (
                f"<Result {len(self.rows)} rows, columns={self.columns!r}, "
                f"truncated={self.truncated!r}, snapshot={self.snapshot!r}>"
            )
        if self.kind == "count":
            return f"<Result count={self.count!r}, snapshot={self.snapshot!r}>"
        if self.kind == "write":
            return f"<Result seq={self.seq!r}, operations={self.operations!r}>"
        return f"<Result {self.raw!r}>"

    def to_pandas(self) -> Any:
        """The rows as a ``pandas.DataFrame`` (pandas must be installed).

        A result read as Arrow (``format="arrow"``) converts its Arrow table (columns
        typed as the server typed them). Otherwise columns come in the order of
        :attr:`columns`; a column present in the rows but not listed there (the key,
        which every row carries) is appended.
        """
        self._need_rows()
        if self.arrow is not None:
            return self.arrow.to_pandas()
        try:
            # Imported here: pandas is optional.
            pandas: Any = importlib.import_module("pandas")
        except ImportError as error:  # pragma: no cover - depends on the environment
            raise ImportError(
                "Result.to_pandas() needs pandas: pip install pandas"
            ) from error
        names = list(self.columns)
        seen = set(names)
        for row in self.rows:
            for name in row:
                if name not in seen:
                    seen.add(name)
                    names.append(name)
        return pandas.DataFrame.from_records(self.rows, columns=names)
