"""A read-only S3 endpoint over local directories, with a latency of its own: the benchmarks' fast server.

moto's server (:class:`~tests.servers.s3.S3Server`) behind a :class:`~tests.servers.proxy.RecordingProxy` is the
test suite's S3: it speaks the whole protocol (writes, conditional writes, copies, listings) but costs a few
milliseconds of CPU a request (werkzeug, moto's models, the proxy's second hop), so on a machine of two cores it
bounds what a benchmark of a client can show. :class:`MirrorS3Server` serves only what a reader asks of S3, from
directories that mirror buckets (one directory a bucket, an object a file), in one :mod:`aiohttp` hop:

* ``GET`` and ``HEAD`` of ``/{bucket}/{key}`` (path style), with ``Range: bytes=a-b``, ``a-`` or ``-n``
  (``206`` and ``Content-Range``; ``416 InvalidRange`` past the end), ``ETag``, ``Last-Modified`` and
  ``Content-Length`` as S3 sends them;
* ``ListObjectsV2`` (``GET /{bucket}?list-type=2&prefix=&delimiter=``, up to 1,000 keys a page);
* S3's XML errors: ``NoSuchKey``, ``NoSuchBucket``, ``InvalidRange``, ``MethodNotAllowed`` for any write.

Every request waits :attr:`MirrorS3Server.latency` first (a network round trip) and is logged as the proxy logs
it (:meth:`~MirrorS3Server.requests`, :attr:`~MirrorS3Server.max_in_flight`, :meth:`~MirrorS3Server.reset`),
so a benchmark reads the same counts from either. It binds 127.0.0.1 only and checks no signature.
"""

from __future__ import annotations

import asyncio
import os
import stat
import threading
from collections.abc import Mapping
from email.utils import formatdate
from pathlib import Path
from xml.sax.saxutils import escape

from aiohttp import web
from tests.servers._lifecycle import AiohttpServer
from tests.servers.proxy import Record, RequestLog, s3_error_body

__all__ = ["MirrorS3Server"]

#: Keys in one page of a listing, as S3's default ``max-keys``.
_PAGE = 1000


class MirrorS3Server(RequestLog, AiohttpServer):
    """Serve directories as S3 buckets, read-only, adding ``latency`` seconds to every request.

    Parameters
    ----------
    buckets
        Bucket names and the directory holding each one's objects (key ``a/b`` is file ``directory/a/b``).
    latency
        Seconds every request waits before it is answered (settable while serving).

    Examples
    --------
    >>> with MirrorS3Server({"data": tmp_path}, latency=0.03) as server:  # doctest: +SKIP
    ...     store = ObstoreStore("s3://data/ds", {"key": "k", "secret": "s",
    ...                                          "client_kwargs": {"endpoint_url": server.url}})
    """

    _what = "the mirror S3 server"

    def __init__(self, buckets: Mapping[str, str | os.PathLike[str]], *, latency: float = 0.0) -> None:
        super().__init__()
        self.buckets = {name: Path(directory).resolve() for name, directory in buckets.items()}
        for directory in self.buckets.values():
            if not directory.is_dir():
                msg = f"not a directory: {directory}"
                raise NotADirectoryError(msg)
        self.latency = latency
        self._lock = threading.Lock()
        self._log: list[Record] = []
        self._in_flight = 0
        self._max_in_flight = 0

    def _thread_name(self) -> str:
        return "MirrorS3Server"

    async def _make_app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        return app

    def __repr__(self) -> str:
        return f"MirrorS3Server({sorted(self.buckets)} at {self._url or 'stopped'}, latency={self.latency})"

    # ------------------------------------------------------------------------------ the handler

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        record = Record(request.method, request.path, request.rel_url.raw_query_string, request.headers.get("Range"))
        with self._lock:
            self._log.append(record)
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)
        try:
            if self.latency > 0:
                await asyncio.sleep(self.latency)
            response = self._answer(request)
            record.status = response.status
            record.bytes = 0 if request.method == "HEAD" else (response.content_length or 0)
            return response
        finally:
            with self._lock:
                self._in_flight -= 1

    def _answer(self, request: web.Request) -> web.Response:
        bucket, _, key = request.path[1:].partition("/")
        root = self.buckets.get(bucket)
        if root is None:
            return _error(request, 404, "NoSuchBucket", "The specified bucket does not exist")
        if request.method not in ("GET", "HEAD"):
            return _error(request, 405, "MethodNotAllowed", "this server is read-only")
        if not key:
            return self._list(request, root)
        parts = key.split("/")
        if any(part in ("", ".", "..") for part in parts):
            return _error(request, 404, "NoSuchKey")
        try:
            fd = os.open(root.joinpath(*parts), os.O_RDONLY)
        except OSError:  # absent, a directory's child that is a file, ...
            return _error(request, 404, "NoSuchKey")
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return _error(request, 404, "NoSuchKey")
            return _object(request, fd, info)
        finally:
            os.close(fd)

    def _list(self, request: web.Request, root: Path) -> web.Response:
        """ListObjectsV2 of ``root``: the keys under ``prefix``, folded at ``delimiter`` into common prefixes."""
        query = request.query
        prefix, delimiter = query.get("prefix", ""), query.get("delimiter", "")
        after = query.get("continuation-token") or query.get("start-after") or ""
        keys = sorted(
            path.relative_to(root).as_posix()
            for path in root.rglob("*")
            if path.is_file() and path.relative_to(root).as_posix().startswith(prefix)
        )
        entries: list[tuple[str, bool]] = []  # (key or common prefix, is a prefix)
        for key in keys:
            folded = key.find(delimiter, len(prefix)) if delimiter else -1
            entry = (key[: folded + len(delimiter)], True) if folded >= 0 else (key, False)
            if entry[0] > after and (not entries or entries[-1] != entry):
                entries.append(entry)
        page, truncated = entries[:_PAGE], len(entries) > _PAGE
        items = []
        for name, is_prefix in page:
            if is_prefix:
                items.append(f"<CommonPrefixes><Prefix>{escape(name)}</Prefix></CommonPrefixes>")
                continue
            info = (root / name).stat()
            items.append(
                f"<Contents><Key>{escape(name)}</Key><LastModified>{_iso(info.st_mtime)}</LastModified>"
                f"<ETag>{escape(_etag(info))}</ETag><Size>{info.st_size}</Size>"
                "<StorageClass>STANDARD</StorageClass></Contents>"
            )
        token = f"<NextContinuationToken>{escape(page[-1][0])}</NextContinuationToken>" if truncated else ""
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            f"<Name>{escape(request.path[1:].partition('/')[0])}</Name><Prefix>{escape(prefix)}</Prefix>"
            f"<KeyCount>{len(page)}</KeyCount><MaxKeys>{_PAGE}</MaxKeys>"
            + (f"<Delimiter>{escape(delimiter)}</Delimiter>" if delimiter else "")
            + f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>{token}{''.join(items)}"
            "</ListBucketResult>"
        ).encode()
        return web.Response(body=body, content_type="application/xml")


def _object(request: web.Request, fd: int, info: os.stat_result) -> web.Response:
    """The object in ``fd`` (whole, or the range asked for), or its headers alone for a HEAD."""
    size = info.st_size
    headers = {
        "ETag": _etag(info),
        "Last-Modified": formatdate(info.st_mtime, usegmt=True),
        "Accept-Ranges": "bytes",
        "Content-Type": "application/octet-stream",
    }
    first, last, status = 0, size - 1, 200
    asked = request.headers.get("Range")
    if asked is not None and request.method == "GET":
        span = _range(asked, size)
        if span is None:
            response = _error(request, 416, "InvalidRange", "The requested range is not satisfiable")
            response.headers["Content-Range"] = f"bytes */{size}"
            return response
        first, last = span
        status = 206
        headers["Content-Range"] = f"bytes {first}-{last}/{size}"
    if request.method == "HEAD":
        headers["Content-Length"] = str(size)
        return web.Response(status=200, headers=headers)
    body = os.pread(fd, last - first + 1, first) if last >= first else b""
    return web.Response(status=status, headers=headers, body=body)


def _range(header: str, size: int) -> tuple[int, int] | None:
    """The first and last byte of ``Range`` header ``bytes=a-b``, ``a-`` or ``-n`` on an object of ``size`` bytes.

    None when the range is not satisfiable (it starts at or past the end, or is an empty suffix); a header that
    is not one byte range is ignored as S3 ignores it: the whole object.
    """
    unit, _, spec = header.partition("=")
    start, dash, end = spec.strip().partition("-")
    if unit.strip() != "bytes" or not dash or "," in spec:
        return (0, size - 1) if size else None
    try:
        if not start:
            suffix = int(end)
            return (max(0, size - suffix), size - 1) if suffix > 0 and size else None
        first = int(start)
        last = min(int(end), size - 1) if end else size - 1
    except ValueError:
        return (0, size - 1) if size else None
    return (first, last) if first < size and first <= last else None


def _etag(info: os.stat_result) -> str:
    """An ETag that changes when the file does (its modification time and size, as aiohttp's static files)."""
    return f'"{info.st_mtime_ns:x}-{info.st_size:x}"'


def _iso(seconds: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _error(request: web.Request, status: int, code: str, message: str | None = None) -> web.Response:
    """An S3 error response (no body for a HEAD, as S3)."""
    body = b"" if request.method == "HEAD" else s3_error_body(code, message=message, resource=request.path)
    return web.Response(status=status, body=body or None, content_type="application/xml")
