"""What a failed request means: missing, refused, too slow, worth another try, or a bug.

Every store turns the errors of its filesystem into deltacells errors that name the object's URL
(:func:`translate`), and retries the transient ones with backoff (:class:`RetryPolicy`). fsspec
filesystems raise different things for the same event (s3fs: ``PermissionError``, ``OSError(EREMOTEIO)``
for S3's ``InternalError``; fsspec's HTTP filesystem: aiohttp's ``ClientResponseError`` with the
status; botocore: its own timeout classes; obstore: its own classes, the status and the cause in the message
of Rust's ``object_store``), so the classification looks at the type, the errno and the HTTP status the
exception carries.
"""

from __future__ import annotations

import asyncio
import errno
import random
import re
from dataclasses import dataclass

from deltacells.errors import (
    DeltaCellsError,
    MissingObjectError,
    StorageAccessError,
    StorageError,
    StorageTimeoutError,
)

__all__ = ["RetryPolicy", "is_transient", "response_status", "translate"]

#: HTTP statuses worth another try: server errors, throttling, gateway timeouts.
TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})

#: errno values of network failures worth another try.
TRANSIENT_ERRNOS = frozenset(
    {errno.ECONNRESET, errno.ECONNABORTED, errno.ECONNREFUSED, errno.EPIPE, errno.ETIMEDOUT, errno.EREMOTEIO}
)

#: Names of exception classes (from aiohttp, botocore, urllib3...) that mean a connection or a read failed.
_TRANSIENT_NAMES = frozenset(
    {
        "ClientConnectionError",
        "ClientConnectorError",
        "ClientOSError",
        "ClientPayloadError",
        "ServerDisconnectedError",
        "ServerTimeoutError",
        "ConnectionClosedError",
        "EndpointConnectionError",
        "ReadTimeoutError",
        "ConnectTimeoutError",
        "IncompleteReadError",
        "ResponseStreamingError",
        "FSTimeoutError",
    }
)


#: How Rust's ``object_store`` (obstore) words a response's status in its errors' messages.
_OBJECT_STORE_STATUS = re.compile(r"status code: (\d{3})")

#: What ``object_store`` (obstore) says of a request that timed out, or of a connection that failed.
_OBJECT_STORE_TIMEOUT = ("timed out", "TimedOut", "deadline has elapsed")
_OBJECT_STORE_CONNECTION = ("error sending request", "connection closed", "Connection refused", "connection reset")


def _from_obstore(exc: BaseException) -> bool:
    return type(exc).__module__.startswith("obstore")


def response_status(exc: BaseException) -> int | None:
    """The HTTP status of the response a failed request got, as the exception (or what caused it) tells it."""
    for e in _chain(exc):
        status = _status(e)
        if status is not None:
            return status
    return None


def _status(exc: BaseException) -> int | None:
    """The HTTP status an exception carries (aiohttp's ``status``, botocore's ``response``, obstore's message)."""
    if _from_obstore(exc):
        found = _OBJECT_STORE_STATUS.search(str(exc))
        return int(found.group(1)) if found else None
    status = getattr(exc, "status", None)
    if isinstance(status, int):
        return status
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        meta = response.get("ResponseMetadata", {})
        code = meta.get("HTTPStatusCode") if isinstance(meta, dict) else None
        return code if isinstance(code, int) else None
    return None


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and its causes (s3fs raises a translated error *from* botocore's)."""
    seen: list[BaseException] = []
    while exc is not None and exc not in seen and len(seen) < 8:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return seen


def is_timeout(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is a request that got no answer in time."""
    return any(
        isinstance(e, TimeoutError | asyncio.TimeoutError)
        or type(e).__name__ in {"ReadTimeoutError", "FSTimeoutError"}
        or (_from_obstore(e) and any(text in str(e) for text in _OBJECT_STORE_TIMEOUT))
        for e in _chain(exc)
    )


def is_transient(exc: BaseException) -> bool:
    """Whether another try of the request may succeed (network failures, 5xx, throttling, timeouts)."""
    if isinstance(exc, DeltaCellsError | FileNotFoundError | PermissionError | IsADirectoryError):
        return False
    for e in _chain(exc):
        if isinstance(e, ConnectionError | TimeoutError | asyncio.TimeoutError):
            return True
        if type(e).__name__ in _TRANSIENT_NAMES:
            return True
        if _from_obstore(e) and _status(e) is None:
            return is_timeout(e) or any(text in str(e) for text in _OBJECT_STORE_CONNECTION)
        status = _status(e)
        if status is not None:
            return status in TRANSIENT_STATUSES
        if isinstance(e, OSError) and e.errno in TRANSIENT_ERRNOS:
            return True
    return False


def _is_refusal(exc: BaseException) -> bool:
    return any(isinstance(e, PermissionError) or _status(e) in (401, 403) for e in _chain(exc))


def _is_missing(exc: BaseException) -> bool:
    return any(isinstance(e, FileNotFoundError) or _status(e) == 404 for e in _chain(exc))


def translate(exc: BaseException, where: str, *, attempts: int = 1, timeout: float | None = None) -> BaseException:
    """The deltacells error for a failed request on the object at URL ``where`` (``exc`` itself if already one).

    Parameters
    ----------
    exc
        What the filesystem raised.
    where
        The object's URL, named in the message.
    attempts
        How many times the request was tried.
    timeout
        The time allowed per attempt, for the message of a timeout.
    """
    if isinstance(exc, DeltaCellsError):
        return exc
    tries = f" ({attempts} attempts)" if attempts > 1 else ""
    if _is_missing(exc):
        return MissingObjectError(f"{where} is missing")
    if _is_refusal(exc):
        msg = (
            f"{where}: access denied ({type(exc).__name__}: {exc}); the credentials are the likely cause: check "
            "the storage_options (key, secret, token, profile) or the environment (e.g. AWS_PROFILE, "
            "AWS_ACCESS_KEY_ID) and that they may read this object"
        )
        return StorageAccessError(msg)
    if is_timeout(exc):
        within = f" within {timeout:g} s" if timeout else " in time"
        msg = (
            f"{where}: no answer{within}{tries}; the storage is unreachable or overloaded "
            "(timeouts can be set through storage_options)"
        )
        return StorageTimeoutError(msg)
    if is_transient(exc):
        return StorageError(f"{where}: the request failed{tries}: {type(exc).__name__}: {exc}")
    return exc


@dataclass(frozen=True)
class RetryPolicy:
    """How transient failures of one request are retried: ``attempts`` tries, exponential backoff with jitter.

    Attributes
    ----------
    attempts
        Tries in all (1: no retry).
    backoff
        Seconds before the second try; doubled for each later one, capped at ``max_backoff``.
    max_backoff
        Longest wait between two tries.
    timeout
        Seconds allowed for one attempt before it is abandoned as a timeout (None: no limit of ours; the
        filesystem's own connect and read timeouts still apply).
    """

    attempts: int = 4
    backoff: float = 0.2
    max_backoff: float = 5.0
    timeout: float | None = 120.0

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        base: float = min(self.max_backoff, self.backoff * 2 ** (attempt - 1))
        return base * (0.5 + random.random() / 2)  # jitter, not cryptography
