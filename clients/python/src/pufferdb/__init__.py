"""PufferDB's Python client: a thin, dependency-free wrapper of the HTTP API.

Example::

    import pufferdb

    db = pufferdb.connect("http://127.0.0.1:7878")
    hotels = db.create_table("hotels", key="id", attributes={"city": "string", "stars": "int"})
    hotels.put([{"id": "h1", "city": "Boston", "stars": 4}])
    for row in hotels.search(city="Boston", limit=10):
        print(row)
    print(db.sql("SELECT COUNT(*) FROM hotels WHERE stars >= 4").count)
"""

from .client import DEFAULT_URL, Client, Table, Text, connect
from .errors import (
    BadRequest,
    Conflict,
    ConnectionFailed,
    Forbidden,
    NotFound,
    Overloaded,
    PufferError,
    ServerError,
    TooLarge,
    Unauthorized,
)
from .result import Result

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_URL",
    "Client",
    "Table",
    "Text",
    "Result",
    "connect",
    "PufferError",
    "BadRequest",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "Conflict",
    "TooLarge",
    "Overloaded",
    "ServerError",
    "ConnectionFailed",
    "__version__",
]
