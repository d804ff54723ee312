"""DuckDB as a peer of `puffer-bench analytics`: loads tables from CSV files and answers
queries, one JSON object per line on stdin and stdout.

Requests:
  {"load": {"table": name, "csv": path, "columns": [[name, type], ...]}}
      type: "string" | "int" | "float" | "bool" | "timestamp" (microseconds since
      the epoch in the file, a TIMESTAMP in DuckDB)
  {"query": text}
  {"size": true}
Answers: {"ok": true}, {"rows": [[cell, ...], ...], "micros": n} (n: the query and
the fetch of its rows, timed here), {"file_bytes": n, "memory": "n MiB"}, or
{"error": text}. Cells are null, numbers, strings; timestamps as microseconds since
the epoch, booleans as 0 and 1 (as the benchmark compares them).
"""

import datetime
import decimal
import json
import os
import sys
import time

try:
    import duckdb
except ImportError:
    print(json.dumps({"error": "the DuckDB peer needs the duckdb package: pip install duckdb"}), flush=True)
    sys.exit(0)

EPOCH = datetime.datetime(1970, 1, 1)
TYPES = {"string": "VARCHAR", "int": "BIGINT", "float": "DOUBLE", "bool": "BOOLEAN", "timestamp": "BIGINT"}


def cell(value):
    if value is None or isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return value
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, datetime.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(datetime.timezone.utc).replace(tzinfo=None)
        delta = value - EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    if isinstance(value, datetime.date):
        return cell(datetime.datetime(value.year, value.month, value.day))
    return str(value)


def main():
    path = sys.argv[1]
    con = duckdb.connect(path)
    for line in sys.stdin:
        request = json.loads(line)
        try:
            if "load" in request:
                load = request["load"]
                columns = ", ".join(
                    f'"{name}": \'{TYPES[kind]}\'' for name, kind in load["columns"]
                )
                selected = ", ".join(
                    f'make_timestamp("{name}") AS "{name}"' if kind == "timestamp" else f'"{name}"'
                    for name, kind in load["columns"]
                )
                con.execute(
                    f'CREATE TABLE "{load["table"]}" AS SELECT {selected} FROM read_csv('
                    f"'{load['csv']}', header = true, allow_quoted_nulls = false, "
                    f"columns = {{{columns}}})"
                )
                con.execute("CHECKPOINT")
                answer = {"ok": True}
            elif "query" in request:
                started = time.perf_counter()
                rows = con.execute(request["query"]).fetchall()
                micros = (time.perf_counter() - started) * 1e6
                answer = {"rows": [[cell(v) for v in row] for row in rows], "micros": micros}
            elif "size" in request:
                memory = con.execute("SELECT memory_usage FROM pragma_database_size()").fetchone()[0]
                answer = {"file_bytes": os.path.getsize(path), "memory": str(memory)}
            else:
                answer = {"error": f"unknown request {request!r}"}
        except Exception as error:  # every error goes back to the benchmark
            answer = {"error": f"{type(error).__name__}: {error}"}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
