"""Typed errors raised by the PufferDB client.

Every error answer of the server is ``{"code": ..., "message": ..., "retryable": ...}``
with an HTTP status (see ``docs/http.md``). The client raises the subclass of
:class:`PufferError` that matches the status, carrying the code, message, status and
whether a retry may help.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Type

__all__ = [
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
    "error_for_status",
]


class PufferError(Exception):
    """Base class of every error the client raises for a failed request.

    Attributes:
        code: the server's stable machine-readable code (``"unknown_table"``,
            ``"syntax_error"``, ...), or a client-side code such as
            ``"connection_failed"``.
        message: what went wrong, for a person.
        retryable: whether the same request may succeed later.
        status: the HTTP status, or ``None`` when no answer was received.
        retry_after: seconds from the ``Retry-After`` header, if the server sent one.
        body: the decoded error body (a dict), when there was one.
    """

    def __init__(
        self,
        code: str,
        message: str,
        *,
        retryable: bool = False,
        status: Optional[int] = None,
        retry_after: Optional[float] = None,
        body: Optional[Dict[str, Any]] = None,
    ) -> None:
        super().__init__(f"{code}: {message}" if code else message)
        self.code = code
        self.message = message
        self.retryable = retryable
        self.status = status
        self.retry_after = retry_after
        self.body = body if body is not None else {}

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(code={self.code!r}, message={self.message!r}, "
            f"status={self.status!r}, retryable={self.retryable!r})"
        )


class BadRequest(PufferError):
    """400: the request is malformed or refused (``syntax_error``, ``unsupported``,
    ``invalid_request``, ``invalid_record``, ``invalid_schema``, ``bad_json``)."""


class Unauthorized(PufferError):
    """401: no bearer token, or an unknown one (``unauthorized``)."""


class Forbidden(PufferError):
    """403: the token lacks the role the request needs (``forbidden``)."""


class NotFound(PufferError):
    """404: unknown table, text or record (``unknown_table``, ``unknown_text``,
    ``not_found``)."""


class Conflict(PufferError):
    """409: the table or text exists already (``table_exists``, ``text_exists``)."""


class TooLarge(PufferError):
    """413: a configured limit was exceeded (``limit_exceeded``): body, batch, pattern,
    result or SQL size."""


class Overloaded(PufferError):
    """429 or 503: the server is overloaded or a shard is unavailable; retry later
    (see :attr:`retry_after`). Always retryable."""


class ServerError(PufferError):
    """5xx other than 503: ``io_error``, ``corrupt``, ``index_error``, ``internal``."""


class ConnectionFailed(PufferError):
    """No answer: the server could not be reached, the connection broke, or the
    request timed out. ``status`` is ``None``; ``retryable`` is ``True``."""


_BY_STATUS: Dict[int, Type[PufferError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: TooLarge,
    429: Overloaded,
    503: Overloaded,
}


def error_for_status(
    status: int,
    body: Optional[Dict[str, Any]],
    retry_after: Optional[float] = None,
    fallback_message: str = "",
) -> PufferError:
    """Builds the typed error for an HTTP error answer.

    Args:
        status: the HTTP status (>= 400).
        body: the decoded JSON error body, or ``None`` if it was not JSON.
        retry_after: the ``Retry-After`` header in seconds, if any.
        fallback_message: the message to use when the body has none.
    """
    body = body or {}
    cls = _BY_STATUS.get(status)
    if cls is None:
        cls = ServerError if status >= 500 else PufferError
    code = str(body.get("code") or f"http_{status}")
    message = str(body.get("message") or fallback_message or f"HTTP {status}")
    retryable = bool(body.get("retryable", False)) or cls is Overloaded
    return cls(
        code,
        message,
        retryable=retryable,
        status=status,
        retry_after=retry_after,
        body=body,
    )
