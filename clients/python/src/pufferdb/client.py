"""The HTTP client: :class:`Client`, :class:`Table` and :class:`Text`.

Only the standard library is used (``urllib.request``); every call is one HTTP
request, so a client may be shared between threads.
"""

from __future__ import annotations

import datetime as _dt
import http.client
import ipaddress
import json
import socket
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from .errors import Conflict, ConnectionFailed, NotFound, PufferError, error_for_status
from .result import Result

__all__ = ["Client", "Table", "Text", "connect", "DEFAULT_URL"]

DEFAULT_URL = "http://127.0.0.1:7878"

Record = Dict[str, Any]
Predicate = Dict[str, Any]
AttributeSpec = Union[
    Mapping[str, str],
    Sequence[Union[Mapping[str, str], Tuple[str, str]]],
]


def connect(
    url: str = DEFAULT_URL, token: Optional[str] = None, timeout: float = 30.0
) -> "Client":
    """Returns a :class:`Client` for the server at ``url``.

    No request is made until the first call. ``token`` is sent as
    ``Authorization: Bearer <token>``; ``timeout`` (seconds) applies to each request.
    """
    return Client(url, token=token, timeout=timeout)


def _decoded_json(payload: bytes, what: str, status: int) -> Any:
    """``payload`` decoded as JSON, or a ``bad_response`` error naming ``what``."""
    try:
        return json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise PufferError(
            "bad_response",
            f"{what}: the answer is not JSON: {payload[:200]!r}",
            status=status,
        ) from error


def _import_pyarrow() -> Any:
    """``pyarrow`` (with its IPC module), or an error that says how to get it."""
    try:
        import importlib

        pyarrow = importlib.import_module("pyarrow")
        importlib.import_module("pyarrow.ipc")
        return pyarrow
    except ImportError as error:
        raise ImportError("Arrow answers need pyarrow: pip install pyarrow") from error


def _json_default(value: Any) -> Any:
    """JSON encoding of values the json module lacks: datetimes (RFC 3339, UTC),
    dates, sets and tuples."""
    if isinstance(value, _dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(_dt.timezone.utc).replace(tzinfo=None)
        text = value.strftime("%Y-%m-%dT%H:%M:%S")
        if value.microsecond:
            text += f".{value.microsecond:06d}"
        return text + "Z"
    if isinstance(value, _dt.date):
        return value.isoformat()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"cannot send a {type(value).__name__} as JSON: {value!r}")


def _dumps(value: Any) -> bytes:
    return json.dumps(
        value, default=_json_default, allow_nan=False, ensure_ascii=False
    ).encode("utf-8")


def _is_loopback(host: Optional[str]) -> bool:
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _normalize_attributes(attributes: Optional[AttributeSpec]) -> List[Dict[str, str]]:
    if attributes is None:
        return []
    if isinstance(attributes, Mapping):
        return [{"name": str(n), "type": str(t)} for n, t in attributes.items()]
    out: List[Dict[str, str]] = []
    for item in attributes:
        if isinstance(item, Mapping):
            out.append({"name": str(item["name"]), "type": str(item["type"])})
        else:
            name, attr_type = item
            out.append({"name": str(name), "type": str(attr_type)})
    return out


def _combine(where: Optional[Predicate], equals: Mapping[str, Any]) -> Optional[Predicate]:
    """``where`` AND one condition per keyword: ``col=value`` is ``eq``, a list, tuple
    or set is ``in``, ``None`` means the record lacks the column."""
    parts: List[Predicate] = []
    if where is not None:
        if not isinstance(where, Mapping):
            raise TypeError(f"where must be a predicate dict, not {type(where).__name__}")
        parts.append(dict(where))
    for column, value in equals.items():
        if value is None:
            parts.append({"not": {"exists": column}})
        elif isinstance(value, (list, tuple, set, frozenset)):
            parts.append({"in": {column: list(value)}})
        else:
            parts.append({"eq": {column: value}})
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    return {"and": parts}


class Client:
    """A connection to one PufferDB server (see :func:`connect`).

    Args:
        url: the server's base URL, e.g. ``"http://127.0.0.1:7878"``.
        token: bearer token (read, write or admin), or ``None`` when auth is off.
        timeout: seconds to wait for each request.
    """

    def __init__(
        self, url: str = DEFAULT_URL, token: Optional[str] = None, timeout: float = 30.0
    ) -> None:
        if "://" not in url:
            url = "http://" + url
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https"):
            raise ValueError(f"unsupported URL scheme {parsed.scheme!r} in {url!r}")
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        handlers: List[Any] = []
        if _is_loopback(parsed.hostname):
            # A local server is never reached through an HTTP proxy.
            handlers.append(urllib.request.ProxyHandler({}))
        self._opener = urllib.request.build_opener(*handlers)

    def __repr__(self) -> str:
        return f"Client({self.url!r}, token={'***' if self.token else None})"

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Nothing to release (each request uses its own connection); for symmetry."""

    # -- transport ---------------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        *,
        body: Optional[bytes] = None,
        json_body: Any = None,
        params: Optional[Mapping[str, Any]] = None,
        content_type: Optional[str] = None,
        raw: bool = False,
        headers_out: Optional[Dict[str, str]] = None,
    ) -> Tuple[int, Any]:
        """Sends one request; returns ``(status, decoded body)`` or raises a
        :class:`PufferError`. ``raw`` returns the body as bytes; ``headers_out``, if
        given, receives the answer's headers (names in lower case)."""
        url = self.url + path
        if params:
            query = {k: v for k, v in params.items() if v is not None}
            if query:
                url += "?" + urllib.parse.urlencode(query, quote_via=urllib.parse.quote)
        headers = {"Accept": "application/json"}
        if json_body is not None:
            body = _dumps(json_body)
            content_type = content_type or "application/json"
        if content_type:
            headers["Content-Type"] = content_type
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(url, data=body, headers=headers, method=method)
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                status = response.status
                payload = response.read()
                if headers_out is not None:
                    headers_out.update((k.lower(), v) for k, v in response.headers.items())
        except urllib.error.HTTPError as error:
            payload = b""
            try:
                payload = error.read()
            except Exception:  # pragma: no cover - broken error body
                pass
            finally:
                error.close()
            raise self._error(error.code, payload, error.headers) from None
        except (urllib.error.URLError, http.client.HTTPException, OSError) as error:
            reason = getattr(error, "reason", error)
            code = "timeout" if isinstance(reason, socket.timeout) else "connection_failed"
            raise ConnectionFailed(
                code, f"{method} {url}: {reason}", retryable=True
            ) from error
        if raw:
            return status, payload
        if not payload:
            return status, None
        return status, _decoded_json(payload, f"{method} {url}", status)

    @staticmethod
    def _error(status: int, payload: bytes, headers: Any) -> PufferError:
        body: Optional[Dict[str, Any]] = None
        try:
            decoded = json.loads(payload.decode("utf-8")) if payload else None
            if isinstance(decoded, dict):
                body = decoded
        except (UnicodeDecodeError, ValueError):
            pass
        retry_after: Optional[float] = None
        header = headers.get("Retry-After") if headers is not None else None
        if header:
            try:
                retry_after = float(header)
            except ValueError:
                retry_after = None
        fallback = payload[:200].decode("utf-8", "replace") if payload else ""
        return error_for_status(status, body, retry_after, fallback)

    def _json(self, method: str, path: str, **kwargs: Any) -> Dict[str, Any]:
        """Sends a request whose answer is a JSON object, and returns it."""
        status, answer = self._request(method, path, **kwargs)
        if not isinstance(answer, dict):
            raise PufferError(
                "bad_response",
                f"{method} {path}: expected a JSON object, got {answer!r:.200}",
                status=status,
            )
        return answer

    # -- SQL ---------------------------------------------------------------------

    def to_pandas(self, query: str, freshness_s: Optional[float] = None) -> Any:
        """The rows of a select as a ``pandas.DataFrame`` (pandas must be installed).

        Read as an Arrow IPC stream when ``pyarrow`` is installed (columns typed as the
        server typed them, no Python objects in between), as JSON otherwise
        (:meth:`Result.to_pandas`). A statement that does not answer rows (a count, a
        write) raises ``TypeError``, as :meth:`Result.to_pandas` does.
        """
        try:
            _import_pyarrow()
            format = "arrow"
        except ImportError:
            format = "json"
        return self.sql(query, freshness_s=freshness_s, format=format).to_pandas()

    def sql(
        self, query: str, freshness_s: Optional[float] = None, format: str = "json"
    ) -> Result:
        """Runs one SQL statement (see ``docs/http.md``).

        ``freshness_s`` bounds staleness for a ``SELECT`` (every SCU acknowledged more
        than that many seconds ago is visible); a ``FRESHNESS s`` clause in the query
        takes precedence. Returns a :class:`Result`: rows for a select, ``.count`` for
        ``COUNT(*)``, ``.seq`` for ``INSERT``/``DELETE``.

        ``format="arrow"`` asks for rows as an Arrow IPC stream, read with ``pyarrow``
        (which must then be installed): the result's :attr:`Result.arrow` is a
        ``pyarrow.Table``, its rows are decoded from it (timestamps as ``datetime``),
        and :meth:`Result.to_pandas` converts the Arrow table without going through
        Python objects. Answers other than rows come as JSON either way.
        """
        request: Dict[str, Any] = {"query": query}
        if freshness_s is not None:
            request["freshness_s"] = freshness_s
        if format == "json":
            return Result(self._json("POST", "/v1/sql", json_body=request))
        if format != "arrow":
            raise ValueError(f"format {format!r}: give 'json' or 'arrow'")
        pyarrow = _import_pyarrow()
        request["format"] = "arrow"
        headers: Dict[str, str] = {}
        status, payload = self._request(
            "POST", "/v1/sql", json_body=request, raw=True, headers_out=headers
        )
        if "arrow" not in headers.get("content-type", ""):
            return Result(_decoded_json(payload, "POST /v1/sql", status))
        table = pyarrow.ipc.open_stream(payload).read_all()
        snapshot = {
            "seq": int(headers.get("x-puffer-snapshot", "0")),
            "age_ms": float(headers.get("x-puffer-snapshot-age-ms", "0")),
        }
        truncated = headers.get("x-puffer-truncated") == "true"
        return Result.from_arrow(table, snapshot, truncated)

    # -- batches over tables -----------------------------------------------------

    def batch(self, operations: Iterable[Mapping[str, Any]]) -> int:
        """Puts and deletes records of one or more tables as one SCU: all of it or
        nothing, on every shard and replica, and seen whole by every read. Each
        operation is ``{"table": name, "put": record}`` or ``{"table": name, "delete":
        key}``; they apply in the order given. Returns the SCU's sequence number.
        """
        items = []
        for i, operation in enumerate(operations):
            if not isinstance(operation, Mapping) or "table" not in operation:
                raise ValueError(f"operation {i}: expected a mapping with a 'table', got {operation!r:.200}")
            items.append(dict(operation))
        answer = self._json("POST", "/v1/batches", json_body={"operations": items})
        return int(answer["seq"])

    # -- tables ------------------------------------------------------------------

    def tables(self, describe: bool = False) -> List[Any]:
        """The names of the tables, or their full descriptions with
        ``describe=True`` (dicts as :meth:`Table.describe` returns)."""
        answer = self._json("GET", "/v1/tables")
        descriptions = answer.get("tables", [])
        if describe:
            return list(descriptions)
        return [d["name"] if isinstance(d, dict) else d for d in descriptions]

    def create_table(
        self,
        name: str,
        key: str,
        attributes: Optional[AttributeSpec] = None,
        *,
        exist_ok: bool = False,
        partition_by: Optional[Tuple[str, str]] = None,
    ) -> "Table":
        """Creates a table and returns it.

        Args:
            name: table name (ASCII letters, digits and ``_``, not starting with a digit).
            key: name of the key column (its values are strings).
            attributes: ``{"name": "type"}`` or a list of ``{"name": ..., "type": ...}``
                dicts or ``(name, type)`` pairs; types are ``string``, ``int``,
                ``float``, ``bool`` and ``timestamp``.
            exist_ok: do not raise :class:`Conflict` if the table exists.
            partition_by: ``(timestamp attribute, "hour" | "day" | "month")``: a
                time-partitioned table, each record in the chunk of its time (a key is
                unique within a chunk; a get answers the newest chunk's record).
        """
        request: Dict[str, Any] = {
            "name": name,
            "key": key,
            "attributes": _normalize_attributes(attributes),
        }
        if partition_by is not None:
            attribute, granularity = partition_by
            request["partition_by"] = {"attribute": attribute, "granularity": granularity}
        try:
            self._json("POST", "/v1/tables", json_body=request)
        except Conflict:
            if not exist_ok:
                raise
        return Table(self, name)

    def drop_table(self, name: str, *, missing_ok: bool = False) -> None:
        """Drops a table and its data (:class:`NotFound` if it does not exist, unless
        ``missing_ok``)."""
        try:
            self._json("DELETE", f"/v1/tables/{_segment(name)}")
        except NotFound:
            if not missing_ok:
                raise

    def table(self, name: str) -> "Table":
        """A handle on the table ``name`` (no request is made)."""
        return Table(self, name)

    # -- texts -------------------------------------------------------------------

    def upload_text(self, name: str, data: Union[bytes, bytearray, str, Any]) -> Dict[str, Any]:
        """Uploads a text (bytes, a str encoded as UTF-8, or a binary file object) under
        ``name``; it is indexed and kept compressed. Returns
        ``{"name", "bytes", "index_bytes"}``. :class:`Conflict` if it exists."""
        if isinstance(data, str):
            payload = data.encode("utf-8")
        elif isinstance(data, (bytes, bytearray, memoryview)):
            payload = bytes(data)
        elif hasattr(data, "read"):
            payload = data.read()
            if isinstance(payload, str):
                payload = payload.encode("utf-8")
        else:
            raise TypeError(f"cannot upload a {type(data).__name__}")
        return self._json(
            "POST",
            f"/v1/texts/{_segment(name)}",
            body=payload,
            content_type="application/octet-stream",
        )

    def text(self, name: str) -> "Text":
        """A handle on the text ``name`` (no request is made)."""
        return Text(self, name)

    # -- service -----------------------------------------------------------------

    def health(self) -> Dict[str, Any]:
        """``GET /health``: ``{"status": "ok"}`` while the server runs."""
        return self._json("GET", "/health")

    def ready(self) -> bool:
        """Whether every table is open and writable (``GET /ready``)."""
        try:
            self._json("GET", "/ready")
        except PufferError as error:
            if error.status is not None:
                return False
            raise
        return True


def _check_key(key: str) -> None:
    if not isinstance(key, str):
        raise TypeError(f"a key is a str, not {type(key).__name__}")
    if not key:
        raise ValueError("a key cannot be empty")


def _segment(text: str) -> str:
    """``text`` percent-encoded as one path segment."""
    return urllib.parse.quote(str(text), safe="")


class Table:
    """One table of a :class:`Client` (from :meth:`Client.table`)."""

    def __init__(self, client: Client, name: str) -> None:
        self.client = client
        self.name = name
        self._path = f"/v1/tables/{_segment(name)}"

    def __repr__(self) -> str:
        return f"Table({self.name!r})"

    def describe(self) -> Dict[str, Any]:
        """``{"name", "key", "attributes", "stats", "watermarks"}``."""
        return self.client._json("GET", self._path)

    def put(self, records: Union[Record, Iterable[Record]]) -> int:
        """Writes one record or a batch of records as one SCU (all or nothing): a
        record with an existing key replaces it. Returns the SCU's sequence number.

        Values: ``str``, ``int``, ``float``, ``bool``, ``datetime``/``date`` (or RFC
        3339 strings, or microseconds) for timestamps; ``None`` means absent.
        """
        batch = [records] if isinstance(records, Mapping) else list(records)
        answer = self.client._json("POST", self._path + "/records", json_body=batch)
        return int(answer["seq"])

    def get(self, key: str, freshness_s: Optional[float] = None) -> Optional[Record]:
        """The record with ``key``, or ``None`` if there is none.
        :class:`NotFound` if the table does not exist."""
        _check_key(key)
        try:
            answer = self.client._json(
                "GET",
                f"{self._path}/records/{_segment(key)}",
                params={"freshness_s": freshness_s},
            )
        except NotFound as error:
            if error.code == "not_found":
                return None
            raise
        record = answer.get("record")
        return dict(record) if isinstance(record, dict) else None

    def delete(self, key: str) -> int:
        """Deletes the record with ``key`` (one SCU; no error if absent). Returns the
        SCU's sequence number."""
        _check_key(key)
        answer = self.client._json("DELETE", f"{self._path}/records/{_segment(key)}")
        return int(answer["seq"])

    def _search(
        self,
        where: Optional[Predicate],
        equals: Mapping[str, Any],
        *,
        columns: Optional[Sequence[str]] = None,
        limit: Optional[int] = None,
        count: bool = False,
        freshness_s: Optional[float] = None,
    ) -> Dict[str, Any]:
        request: Dict[str, Any] = {}
        predicate = _combine(where, equals)
        if predicate is not None:
            request["where"] = predicate
        if columns is not None:
            request["columns"] = list(columns)
        if limit is not None:
            request["limit"] = int(limit)
        if count:
            request["count"] = True
        if freshness_s is not None:
            request["freshness_s"] = freshness_s
        return self.client._json("POST", self._path + "/search", json_body=request)

    def search(
        self,
        where: Optional[Predicate] = None,
        columns: Optional[Sequence[str]] = None,
        limit: Optional[int] = None,
        freshness_s: Optional[float] = None,
        **equals: Any,
    ) -> Result:
        """Records matching ``where`` AND every keyword condition, sorted by key.

        Args:
            where: a JSON predicate (``{"range": {"price": {"gte": 10}}}``, ...; see
                ``docs/http.md``).
            columns: the columns to return (the key is always returned).
            limit: at most this many rows: *any* ``limit`` matching rows (not
                necessarily those with the smallest keys), sorted by key;
                ``Result.truncated`` says whether more matched.
            freshness_s: staleness bound in seconds.
            **equals: ``column=value`` for equality; a list/tuple/set value means
                "one of" (``in``); ``None`` means the record lacks the column.

        Example: ``table.search(city="Boston", limit=10)``.
        """
        return Result(
            self._search(
                where, equals, columns=columns, limit=limit, freshness_s=freshness_s
            )
        )

    def count(
        self,
        where: Optional[Predicate] = None,
        freshness_s: Optional[float] = None,
        **equals: Any,
    ) -> int:
        """How many records match (same conditions as :meth:`search`)."""
        answer = self._search(where, equals, count=True, freshness_s=freshness_s)
        return int(answer["count"])


def _pattern(pattern: Union[str, bytes]) -> str:
    """A text pattern as the UTF-8 query parameter the server takes."""
    if isinstance(pattern, (bytes, bytearray, memoryview)):
        try:
            return bytes(pattern).decode("utf-8")
        except UnicodeDecodeError as error:
            # The server decodes patterns as UTF-8 and would replace invalid bytes.
            raise ValueError(f"a pattern must be valid UTF-8: {bytes(pattern)!r}") from error
    if isinstance(pattern, str):
        return pattern
    raise TypeError(f"a pattern is a str or bytes, not {type(pattern).__name__}")


class Text:
    """One uploaded text of a :class:`Client` (from :meth:`Client.text`), queried
    without decompressing it. Patterns are ``str`` or UTF-8 ``bytes`` (the HTTP API
    takes patterns as UTF-8 query parameters, so other bytes cannot be searched for)."""

    def __init__(self, client: Client, name: str) -> None:
        self.client = client
        self.name = name
        self._path = f"/v1/texts/{_segment(name)}"

    def __repr__(self) -> str:
        return f"Text({self.name!r})"

    def upload(self, data: Union[bytes, bytearray, str, Any]) -> Dict[str, Any]:
        """Uploads this text (see :meth:`Client.upload_text`)."""
        return self.client.upload_text(self.name, data)

    def count(self, pattern: Union[str, bytes]) -> int:
        """How many times ``pattern`` occurs (overlapping occurrences count)."""
        answer = self.client._json("GET", self._path + "/count", params={"pattern": _pattern(pattern)})
        return int(answer["count"])

    def search(self, pattern: Union[str, bytes], limit: Optional[int] = None) -> List[int]:
        """Byte offsets of the occurrences of ``pattern``, ascending (with ``limit``,
        the smallest ``limit`` ones)."""
        answer = self.client._json(
            "GET", self._path + "/search", params={"pattern": _pattern(pattern), "limit": limit}
        )
        return [int(x) for x in answer["offsets"]]

    def range(
        self, lo: Union[str, bytes], hi: Union[str, bytes], limit: Optional[int] = None
    ) -> List[int]:
        """Byte offsets ``j`` whose suffix ``text[j:]`` is ``>= lo`` and whose first
        ``len(hi)`` bytes are ``<= hi`` (byte order), ascending (with ``limit``, the
        smallest ``limit`` ones). Either bound may be empty (no bound). Without a limit,
        more than the server's ``max_result_rows`` offsets raise :class:`TooLarge`."""
        answer = self.client._json(
            "GET",
            self._path + "/range",
            params={"lo": _pattern(lo), "hi": _pattern(hi), "limit": limit},
        )
        return [int(x) for x in answer["offsets"]]

    def wildcard(
        self,
        prefix: Union[str, bytes],
        suffix: Union[str, bytes],
        max_gap: int,
        limit: Optional[int] = None,
    ) -> List[Tuple[int, int]]:
        """Matches of ``prefix``, then at most ``max_gap`` bytes, then ``suffix`` (which
        starts at or after the end of ``prefix``), as ``(start, length)`` pairs:
        ``text[start:start + length]`` begins with ``prefix`` and ends with ``suffix``.
        Ascending by start, then length; with ``limit``, the first ``limit`` of them. A
        prefix or suffix occurring more than the server's ``max_result_rows`` times
        raises :class:`TooLarge`, as do more matches than that without a limit."""
        answer = self.client._json(
            "GET",
            self._path + "/wildcard",
            params={
                "prefix": _pattern(prefix),
                "suffix": _pattern(suffix),
                "max_gap": max_gap,
                "limit": limit,
            },
        )
        return [(int(m["start"]), int(m["len"])) for m in answer["matches"]]

    def extract(self, offset: int, length: int) -> bytes:
        """``length`` bytes from byte ``offset`` (fewer at the end of the text)."""
        _, payload = self.client._request(
            "GET",
            self._path + "/extract",
            params={"offset": int(offset), "len": int(length)},
            raw=True,
        )
        return bytes(payload)
