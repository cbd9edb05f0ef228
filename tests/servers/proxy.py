"""An HTTP reverse proxy on 127.0.0.1 that adds latency, records requests and injects faults.

The proxy runs an :mod:`aiohttp` server on its own event loop in a daemon thread, so it serves clients that
live on any other loop or thread (s3fs, fsspec's HTTP filesystem, botocore, plain ``urllib``). Tests read its
log to assert how many requests a piece of code made and how many bytes it downloaded; they never assert
durations: :attr:`RecordingProxy.latency` only makes concurrency observable (see
:attr:`RecordingProxy.max_in_flight`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import uuid
from dataclasses import dataclass
from xml.sax.saxutils import escape

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy
from tests.servers._lifecycle import AiohttpServer
from yarl import URL

__all__ = ["S3_ERROR_CODES", "Fault", "Record", "RecordingProxy", "RequestLog", "s3_error_body"]

#: Hop-by-hop headers (RFC 9110 section 7.6.1) and headers the proxy recomputes itself; never forwarded.
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
#: Request headers the proxy does not forward: aiohttp's client sets them from the upstream URL and the body,
#: and ``Expect: 100-continue`` is answered by the proxy's own server (the body has been read already).
_REQUEST_DROP = _HOP_BY_HOP | {"host", "content-length", "expect"}
#: Response headers the proxy does not copy back: aiohttp's server computes the framing itself.
_RESPONSE_DROP = _HOP_BY_HOP | {"date", "server"}

#: The S3 error code sent for each injected status. botocore parses the code out of the XML body and decides
#: from it whether to retry (``SlowDown``, ``InternalError``, ...) and s3fs maps it to a Python exception
#: (``AccessDenied`` -> :class:`PermissionError`).
S3_ERROR_CODES: dict[int, str] = {
    400: "InvalidRequest",
    403: "AccessDenied",
    404: "NoSuchKey",
    409: "OperationAborted",
    416: "InvalidRange",
    429: "SlowDown",
    500: "InternalError",
    502: "BadGateway",
    503: "SlowDown",
    504: "GatewayTimeout",
}

_S3_ERROR_MESSAGES: dict[str, str] = {
    "AccessDenied": "Access Denied",
    "InternalError": "We encountered an internal error. Please try again.",
    "SlowDown": "Please reduce your request rate.",
    "NoSuchKey": "The specified key does not exist.",
}


def s3_error_body(code: str, *, message: str | None = None, resource: str = "") -> bytes:
    """The XML body of an S3 error response.

    Parameters
    ----------
    code
        The S3 error code, such as ``"AccessDenied"`` or ``"SlowDown"``.
    message
        The human-readable message; a stock one for ``code`` by default.
    resource
        The ``<Resource>`` element (the request path).

    Returns
    -------
    bytes
        UTF-8 encoded XML as S3 sends it.
    """
    message = message if message is not None else _S3_ERROR_MESSAGES.get(code, code)
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{escape(code)}</Code><Message>{escape(message)}</Message>"
        f"<Resource>{escape(resource)}</Resource><RequestId>{uuid.uuid4().hex[:16].upper()}</RequestId></Error>"
    ).encode()


@dataclass
class Record:
    """One request that reached a :class:`RecordingProxy`.

    Records are appended when a request arrives and completed when its response has been sent, so a request
    that is still running (or hung by a fault) shows ``status=None``. :meth:`RecordingProxy.requests` returns
    copies, which do not change afterwards.

    Attributes
    ----------
    method
        The HTTP method, upper case.
    path
        The URL path without the query, percent-decoded (``/bucket/dir/key``).
    query
        The query string as sent (still percent-encoded), without the ``?``; ``""`` if there is none.
    range
        The ``Range`` request header, or ``None``.
    status
        The response status sent to the client; ``None`` while the request runs or if it never got an answer.
    bytes
        The number of response body bytes sent to the client.
    fault
        ``"status"`` or ``"hang"`` if a fault rule answered the request, else ``None``.
    error
        A description of what went wrong forwarding the request (upstream unreachable, client went away), or
        ``None``.
    """

    method: str
    path: str
    query: str
    range: str | None
    status: int | None = None
    bytes: int = 0
    fault: str | None = None
    error: str | None = None


@dataclass
class Fault:
    """A fault injection rule of a :class:`RecordingProxy` (made by :meth:`RecordingProxy.add_fault`).

    Attributes
    ----------
    path_contains
        The rule matches requests whose decoded path contains this string (``""`` matches every request).
    status
        The status of the immediate error response, or ``None`` for a hang.
    hang
        Whether matching requests never get an answer (until the proxy stops).
    times
        How many matching requests the rule faults before it expires; ``None`` for no limit.
    method
        The HTTP method the rule is limited to, or ``None`` for all.
    code
        The S3 error code of the response body.
    hits
        How many requests the rule has faulted so far.
    """

    path_contains: str
    status: int | None
    hang: bool
    times: int | None
    method: str | None
    code: str | None
    hits: int = 0

    @property
    def expired(self) -> bool:
        """Whether the rule has faulted its ``times`` requests and no longer applies."""
        return self.times is not None and self.hits >= self.times

    def matches(self, method: str, path: str) -> bool:
        """Whether the rule applies to a request (ignoring expiry)."""
        return (self.method is None or self.method == method) and self.path_contains in path


class RequestLog:
    """The requests a test server received: filtered copies of their records, their count, how many ran at once.

    A server using it sets ``_lock`` (a :class:`threading.Lock`), ``_log`` (a list of :class:`Record`, in order
    of arrival), ``_in_flight`` and ``_max_in_flight`` (both 0) in its ``__init__``, and counts each request in and
    out of ``_in_flight`` (raising ``_max_in_flight``) under the lock.
    """

    _lock: threading.Lock
    _log: list[Record]
    _in_flight: int
    _max_in_flight: int

    def requests(self, method: str | None = None, path_contains: str | None = None) -> list[Record]:
        """The requests received so far, in order of arrival.

        Parameters
        ----------
        method
            Only requests with this HTTP method (case-insensitive).
        path_contains
            Only requests whose decoded path contains this string.

        Returns
        -------
        list of Record
            Copies of the log entries, unaffected by later requests.
        """
        method = method.upper() if method is not None else None
        with self._lock:
            return [
                dataclasses.replace(record)
                for record in self._log
                if (method is None or record.method == method)
                and (path_contains is None or path_contains in record.path)
            ]

    def count(self, method: str | None = None, path_contains: str | None = None) -> int:
        """The number of requests received so far, filtered as in :meth:`requests`."""
        return len(self.requests(method, path_contains))

    @property
    def in_flight(self) -> int:
        """The number of requests being handled right now."""
        with self._lock:
            return self._in_flight

    @property
    def max_in_flight(self) -> int:
        """The largest number of requests handled at the same time since the start or the last :meth:`reset`."""
        with self._lock:
            return self._max_in_flight

    def reset(self) -> None:
        """Clear the log and set :attr:`max_in_flight` to the number of requests in flight now."""
        with self._lock:
            self._log.clear()
            self._max_in_flight = self._in_flight


class RecordingProxy(RequestLog, AiohttpServer):
    """An HTTP reverse proxy on 127.0.0.1 in front of ``upstream``, with a request log and fault injection.

    Every request (any method, path, query, headers but ``Host`` and hop-by-hop ones, body) is forwarded to
    ``upstream`` and the response (status, headers, body) is sent back unchanged: the proxy's client neither
    decompresses bodies nor follows redirects, so ``Content-Length``, ``Content-Range``, ``Content-Encoding``
    and ``ETag`` reach the client as the upstream sent them.

    The upstream's response is buffered, and the request's :class:`Record` completed (and the request counted
    out of :attr:`in_flight`) before the response is sent: once a client call returns, the log already shows
    its requests with their status and bytes, and requests made one after the other never count as
    concurrent (:attr:`max_in_flight` stays 1).

    :meth:`start` binds a free port on 127.0.0.1 and serves in a background thread (returning ``self``, so
    ``proxy = RecordingProxy(url).start()`` works); :attr:`url` is then ``http://127.0.0.1:PORT``.
    :meth:`stop` cancels the hung and running requests (closing their connections) and ends the thread;
    calling it again, or on a proxy that was never started, does nothing. The log stays readable.

    Parameters
    ----------
    upstream
        The base URL requests are forwarded to, like ``http://127.0.0.1:5000``; a path prefix in it is
        prepended to every request path.
    latency
        Seconds to wait (with :func:`asyncio.sleep`, so concurrent requests overlap) before handling each
        request: a network round trip. Can be changed at any time through the attribute of the same name.

    Attributes
    ----------
    upstream
        The upstream base URL.
    latency
        The delay added to each request, in seconds.

    Examples
    --------
    >>> with RecordingProxy("http://127.0.0.1:5000", latency=0.01) as proxy:  # doctest: +SKIP
    ...     fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": proxy.url}, ...)
    ...     fs.cat_file("bucket/key", start=0, end=10)
    ...     assert proxy.count("GET", path_contains="/key") == 1
    """

    _what = "the proxy"

    def __init__(self, upstream: str, *, latency: float = 0.0) -> None:
        self.upstream = upstream.rstrip("/")
        self.latency = latency
        self._lock = threading.Lock()
        self._log: list[Record] = []
        self._faults: list[Fault] = []
        self._in_flight = 0
        self._max_in_flight = 0
        super().__init__()
        self._session: aiohttp.ClientSession | None = None
        self._stopping: asyncio.Event | None = None
        self._handlers: set[asyncio.Task[object]] = set()
        self._open: set[int] = set()  # id() of the records whose requests are in flight

    # ------------------------------------------------------------------------------ lifecycle

    def _thread_name(self) -> str:
        return f"RecordingProxy({self.upstream})"

    async def _make_app(self) -> web.Application:
        self._stopping = asyncio.Event()
        self._session = aiohttp.ClientSession(
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            connector=aiohttp.TCPConnector(limit=0),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
        )
        app = web.Application(client_max_size=1024**3)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        return app

    async def _close(self) -> None:
        """Cancel the hung and running requests (closing their connections), then stop serving."""
        if self._stopping is not None:
            self._stopping.set()
        current = asyncio.current_task()
        handlers = [task for task in self._handlers if task is not current]
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        await super()._close()
        if self._session is not None:
            await self._session.close()
        self._session = None

    def __repr__(self) -> str:
        where = self._url or "stopped"
        return f"RecordingProxy({self.upstream!r} at {where}, latency={self.latency}, requests={len(self._log)})"

    # ------------------------------------------------------------------------------ the log

    def bytes_sent(self, method: str | None = None, path_contains: str | None = None) -> int:
        """The response body bytes sent to clients so far, filtered as in :meth:`requests`."""
        return sum(record.bytes for record in self.requests(method, path_contains))

    # ------------------------------------------------------------------------------ faults

    def add_fault(
        self,
        path_contains: str,
        *,
        status: int | None = None,
        hang: bool = False,
        times: int | None = None,
        method: str | None = None,
        code: str | None = None,
    ) -> Fault:
        """Fault the requests whose path contains ``path_contains``.

        The rules are tried in the order they were added; the first one that matches a request and has not
        expired answers it, and the request is not forwarded. Faulted requests are logged like others (their
        :attr:`Record.fault` says how they were answered), after the proxy's :attr:`latency`.

        Parameters
        ----------
        path_contains
            Matched against the decoded request path (``""`` matches every request).
        status
            Answer at once with this status and an S3-style XML error body (``AccessDenied`` for 403,
            ``InternalError`` for 500, ``SlowDown`` for 503, see :data:`S3_ERROR_CODES`; HEAD responses carry
            no body, as in S3).
        hang
            Never answer: the request waits until the proxy stops, when its connection is closed.
        times
            Fault only the first ``times`` matching requests, then let requests through (for retries of
            transient errors); ``None`` faults every matching request.
        method
            Only requests with this HTTP method (case-insensitive).
        code
            The S3 error code of the body, overriding the one for ``status``.

        Returns
        -------
        Fault
            The rule; its :attr:`Fault.hits` counts the requests it faulted.
        """
        if (status is None) == (not hang):
            msg = "give exactly one of status= or hang=True"
            raise ValueError(msg)
        if times is not None and times < 1:
            msg = f"times must be positive or None, not {times}"
            raise ValueError(msg)
        if status is not None and code is None:
            code = S3_ERROR_CODES.get(status, f"Http{status}")
        rule = Fault(path_contains, status, hang, times, method.upper() if method else None, code)
        with self._lock:
            self._faults.append(rule)
        return rule

    def clear_faults(self) -> None:
        """Remove every fault rule."""
        with self._lock:
            self._faults.clear()

    def _claim_fault(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for rule in self._faults:
                if not rule.expired and rule.matches(method, path):
                    rule.hits += 1
                    return rule
        return None

    # ------------------------------------------------------------------------------ the handler

    def _finish(self, record: Record, **changes: object) -> None:
        """Complete ``record`` and count its request out of :attr:`in_flight` (once).

        Called before the response goes out, so that a client that has its answer also finds it logged.
        """
        with self._lock:
            for name, value in changes.items():
                setattr(record, name, value)
            if id(record) in self._open:
                self._open.discard(id(record))
                self._in_flight -= 1

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        record = Record(
            method=request.method,
            path=request.path,
            query=request.rel_url.raw_query_string,
            range=request.headers.get("Range"),
        )
        with self._lock:
            self._log.append(record)
            self._open.add(id(record))
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)
        try:
            if self.latency > 0:
                await asyncio.sleep(self.latency)
            rule = self._claim_fault(request.method, request.path)
            if rule is not None:
                return await self._fault(request, record, rule)
            return await self._forward(request, record)
        except BaseException as exc:
            self._finish(record, error=record.error or repr(exc))
            raise
        finally:
            self._finish(record)
            self._handlers.discard(task)

    async def _fault(self, request: web.Request, record: Record, rule: Fault) -> web.StreamResponse:
        if rule.hang:
            with self._lock:
                record.fault = "hang"
            assert self._stopping is not None
            await self._stopping.wait()
            # the proxy is stopping: drop the connection without an answer
            if request.transport is not None:
                request.transport.close()
            raise asyncio.CancelledError
        assert rule.status is not None and rule.code is not None
        body = b"" if request.method == "HEAD" else s3_error_body(rule.code, resource=request.path)
        response = web.Response(status=rule.status, body=body or None, content_type="application/xml")
        if rule.status in (429, 503):
            response.headers["Retry-After"] = "0"
        self._finish(record, status=rule.status, bytes=len(body), fault="status")
        return response

    async def _forward(self, request: web.Request, record: Record) -> web.StreamResponse:
        assert self._session is not None
        headers = _forwarded(request.headers, _REQUEST_DROP)
        body = await request.read()
        url = URL(self.upstream + request.raw_path, encoded=True)
        try:
            async with self._session.request(
                request.method,
                url,
                headers=headers,
                data=body if body else None,
                allow_redirects=False,
                skip_auto_headers=("Accept", "Accept-Encoding", "Content-Type", "User-Agent"),
            ) as upstream:
                # buffered, so that the record is complete before the client can see the end of the response
                payload = await upstream.read()
                status, reason = upstream.status, upstream.reason
                response_headers = _forwarded(upstream.headers, _RESPONSE_DROP)
        except (aiohttp.ClientError, OSError) as exc:
            message = f"RecordingProxy: upstream {self.upstream} failed: {exc!r}".encode()
            self._finish(record, status=502, bytes=len(message), error=repr(exc))
            return web.Response(status=502, body=message, content_type="text/plain")
        if request.method == "HEAD":
            # no body, but the upstream's Content-Length (the size of the object) goes back unchanged
            payload = b""
        else:
            response_headers.popall("Content-Length", None)  # set by aiohttp from the (raw) payload
        response = web.Response(status=status, reason=reason, headers=response_headers, body=payload or None)
        self._finish(record, status=status, bytes=len(payload))
        return response


def _forwarded(headers: CIMultiDictProxy[str], drop: frozenset[str]) -> CIMultiDict[str]:
    """The headers to pass on: all but ``drop`` and those named in the ``Connection`` header."""
    named = {token.strip().lower() for value in headers.getall("Connection", []) for token in value.split(",")}
    return CIMultiDict((name, value) for name, value in headers.items() if name.lower() not in drop | named)
