"""A store over any fsspec filesystem: local paths, ``file://``, ``memory://``, ``s3://``, ``gs://``..."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import copy
import errno
import functools
import os
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Future
from typing import Any, TypeVar

import fsspec
from fsspec.implementations.local import LocalFileSystem

from deltacells import _internals
from deltacells._checks import check_integer
from deltacells.errors import OutputExistsError
from deltacells.storage._base import DEFAULT_IO_CONCURRENCY, DEFAULT_LOCAL_IO_CONCURRENCY, BaseStore
from deltacells.storage._faults import RetryPolicy, is_transient, translate
from deltacells.storage._objects import StoredObject, modified_of

__all__ = ["DEFAULT_TIMEOUTS", "FsspecStore"]

T = TypeVar("T")

#: Connect and read timeouts (seconds) that deltacells sets for s3 and http(s) unless storage_options set
#: their own: a server that never answers gives an error, not a hang.
DEFAULT_TIMEOUTS = {"connect": 10.0, "read": 30.0}


def with_default_timeouts(protocol: str, options: Mapping[str, Any], *, connections: int = 64) -> dict[str, Any]:
    """``options`` plus deltacells' default timeouts for ``protocol``, where the user set none.

    s3 (s3fs, botocore): ``config_kwargs`` ``connect_timeout`` / ``read_timeout``, 64 pooled connections,
    botocore's and s3fs's own retries off (deltacells retries, once, for every filesystem alike), and botocore's
    checksum of each response off (``response_checksum_validation="when_required"``): a tile read whole is
    checked against its own CRC-32, and botocore's pass over the same bytes cost a remote scan about 6% of its
    CPU (measured, ``benchmarks/bench_object_storage.py``). Uploads keep botocore's checksums.
    http(s) (aiohttp): ``client_kwargs["timeout"]``.
    """
    merged = copy.copy(dict(options))
    if protocol in ("s3", "s3a"):
        config = dict(merged.get("config_kwargs") or {})
        config.setdefault("connect_timeout", DEFAULT_TIMEOUTS["connect"])
        config.setdefault("read_timeout", DEFAULT_TIMEOUTS["read"])
        config.setdefault("retries", {"total_max_attempts": 1})  # deltacells' RetryPolicy retries
        config.setdefault("max_pool_connections", connections)  # botocore's default of 10 would cap concurrency
        if _botocore_has_option("response_checksum_validation"):  # botocore >= 1.36 checks responses by default
            config.setdefault("response_checksum_validation", "when_required")
        merged["config_kwargs"] = config
        merged.setdefault("skip_instance_cache", True)  # an instance of its own, whose s3fs retries are set
    elif protocol in ("http", "https"):
        client = dict(merged.get("client_kwargs") or {})
        if "timeout" not in client:
            import aiohttp

            client["timeout"] = aiohttp.ClientTimeout(
                total=None, sock_connect=DEFAULT_TIMEOUTS["connect"], sock_read=DEFAULT_TIMEOUTS["read"]
            )
        merged["client_kwargs"] = client
    return merged


@functools.cache
def _botocore_has_option(name: str) -> bool:
    """Whether the installed botocore's ``Config`` takes ``name`` (an option newer releases added)."""
    try:
        import botocore.config
    except ImportError:
        return False
    try:
        botocore.config.Config(**{name: "when_required"})
    except TypeError:
        return False
    return True


#: The filesystems deltacells made for itself (``skip_instance_cache``: s3fs with its retries set), by process and
#: options: every store with the same options shares one (a collection of a thousand datasets in a bucket opens one
#: client, not a thousand: a new s3fs instance loads botocore's S3 model, about 0.3 s of CPU).
_OWN_FILESYSTEMS: dict[tuple[int, str], fsspec.AbstractFileSystem] = {}
_OWN_FILESYSTEMS_LOCK = threading.Lock()


def _filesystem(url: str, protocol: str, options: dict[str, Any]) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec filesystem and root path of ``url``: fsspec's, or deltacells' own one for these options."""
    if not options.get("skip_instance_cache") or "::" in url:
        found: tuple[fsspec.AbstractFileSystem, str] = fsspec.core.url_to_fs(url, **options)
        return found
    key = (os.getpid(), fsspec.utils.tokenize(protocol, options))
    with _OWN_FILESYSTEMS_LOCK:
        fs = _OWN_FILESYSTEMS.get(key)
    if fs is not None:
        return fs, fsspec.core.strip_protocol(url)
    fs, root = fsspec.core.url_to_fs(url, **options)
    if protocol in ("s3", "s3a") and getattr(fs, "retries", 1) > 1:
        fs.retries = 1  # s3fs's own loop over its retryable errors: deltacells' RetryPolicy does it
    with _OWN_FILESYSTEMS_LOCK:
        fs = _OWN_FILESYSTEMS.setdefault(key, fs)
    return fs, root


def _read_local_range(path: str, start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of a local file (fewer at its end): ``pread`` on a descriptor, no file object.

    A buffered file object (``open``, ``seek``, ``read``) costs about as much again as the read of a chunk's
    frames from the page cache.
    """
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    try:
        parts = []
        while start < end:  # a read may return less than asked (a 2 GiB cap per call on Linux), 0 at the end
            part = _read_at(descriptor, end - start, start)
            if not part:
                break
            parts.append(part)
            start += len(part)
        return parts[0] if len(parts) == 1 else b"".join(parts)
    finally:
        os.close(descriptor)


def _seek_and_read(descriptor: int, size: int, offset: int) -> bytes:
    """``os.pread`` where there is none (Windows)."""
    os.lseek(descriptor, offset, os.SEEK_SET)
    return os.read(descriptor, size)


_read_at = getattr(os, "pread", _seek_and_read)


def _empty_range_or_raise(exc: OSError, start: int | None, end: int | None, size: int) -> bytes:
    """``b""`` if ``[start:end]`` of an object of ``size`` bytes is empty (a server refused the range), else ``exc``."""
    first, stop, _ = slice(start, end).indices(size)
    if stop > first:
        raise exc
    return b""


def _plain(start: int | None, end: int | None) -> bool:
    """Whether fsspec reads ``[start:end]`` with slice semantics without knowing the size first."""
    if end is None:
        return True  # the whole object, from an offset, or a suffix
    if end < 0:
        return False
    return (start is None and end > 0) or (start is not None and 0 <= start < end)


class FsspecStore(BaseStore):
    """The objects of one dataset root, read and written through fsspec.

    The filesystem is created on first use in each process; the store pickles to its URL
    and storage options only.

    Parameters
    ----------
    url
        A local path or any fsspec URL (``s3://bucket/prefix``, ``memory://x``, ``file:///data``...).
    storage_options
        Passed to the fsspec filesystem (credentials, endpoint, timeouts...). For s3 and http(s), connect and
        read timeouts of 10 s and 30 s are added unless these options set their own (see
        ``DEFAULT_TIMEOUTS``).
    io_concurrency
        The most requests in flight at once (default 32 on remote filesystems, 8 on a local disk).
    retry
        How transient failures (5xx, throttling, dropped connections, timeouts) are retried.
    """

    def __init__(
        self,
        url: str | os.PathLike[str],
        storage_options: Mapping[str, Any] | None = None,
        *,
        io_concurrency: int | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        if io_concurrency is not None:
            io_concurrency = check_integer("io_concurrency", io_concurrency, minimum=1)
        self._io_concurrency = io_concurrency
        self.retry = retry or RetryPolicy()
        url = os.fspath(url)
        # A local path is made absolute now: the store must name the same place after a pickle to a process
        # in another working directory, and in what is recorded of it (uns, exported h5ad files).
        self.url = url if "://" in url or "::" in url else os.path.abspath(os.path.expanduser(url))
        self.storage_options = dict(storage_options or {})
        self._fs: fsspec.AbstractFileSystem | None = None
        self._root: str | None = None
        self._pid: int | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.url, self.storage_options, self._io_concurrency, self.retry))

    @property
    def io_concurrency(self) -> int:
        """The most requests in flight at once (``io_concurrency=``, or 32 remote / 8 local)."""
        if self._io_concurrency is not None:
            return self._io_concurrency
        return DEFAULT_LOCAL_IO_CONCURRENCY if self.is_local else DEFAULT_IO_CONCURRENCY

    # --------------------------------------------------------------------------------- filesystem

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        """The fsspec filesystem, created on first use in each process."""
        if self._fs is None or self._pid != os.getpid():
            protocol = fsspec.utils.get_protocol(self.url)
            connections = max(64, self._io_concurrency or DEFAULT_IO_CONCURRENCY)
            options = with_default_timeouts(protocol, self.storage_options, connections=connections)
            self._fs, self._root = _filesystem(self.url, protocol, options)
            self._pid = os.getpid()
            self._limits: dict[asyncio.AbstractEventLoop, asyncio.Semaphore] = {}
        return self._fs

    @property
    def is_async(self) -> bool:
        """Whether the filesystem is asynchronous (s3, gcs, http...).

        Requests then run as coroutines on fsspec's event loop instead of threads.
        """
        return _internals.fsspec_is_async(self.fs)

    @property
    def reads_asynchronously(self) -> bool:
        """Whether reads are coroutines on fsspec's event loop (:attr:`is_async`), not the store's threads."""
        return self.is_async

    @property
    def root(self) -> str:
        """The root path inside :attr:`fs`, without a trailing slash."""
        _ = self.fs
        assert self._root is not None
        return self._root.rstrip("/")

    def _full(self, path: str) -> str:
        """The path of ``path`` inside :attr:`fs`."""
        path = path.strip("/")
        return f"{self.root}/{path}" if path else self.root

    @property
    def is_local(self) -> bool:
        """Whether the store is a directory on a local disk."""
        return isinstance(self.fs, LocalFileSystem)

    def local_path(self, path: str) -> str | None:
        """The filesystem path of ``path`` when the store is local, else None."""
        return self._full(path) if self.is_local else None

    # -------------------------------------------------------------------------------------- reads

    def read(self, path: str, start: int | None = None, end: int | None = None) -> bytes:
        """The bytes ``[start, end)`` of object ``path`` (see :meth:`~deltacells.storage.BaseStore.read`).

        One request per call: pass the range (e.g. ``0, size`` with the size from the manifest) and s3fs sends
        no HEAD first. Transient failures are retried (``retry``); errors name the object's URL.
        """
        if self.is_async:
            return self.submit_read(path, start, end).result()
        return self._retrying(path, lambda: self._read_sync(path, start, end))

    def submit_read(self, path: str, start: int | None = None, end: int | None = None) -> Future[bytes]:
        """Start a read; at most ``io_concurrency`` in flight.

        On an asynchronous filesystem the read is a coroutine on fsspec's event loop, else it runs on the
        store's I/O threads.
        """
        if not self.is_async:
            return super().submit_read(path, start, end)
        return asyncio.run_coroutine_threadsafe(
            self._bounded(path, lambda: self._read_async(path, start, end)), self.fs.loop
        )

    def _read_sync(self, path: str, start: int | None, end: int | None) -> bytes:
        full = self._full(path)
        if self.is_local and start is not None and end is not None and 0 <= start <= end:
            # A range of a local file, without fsspec's path handling (tens of microseconds a call, which a
            # read of one chunk of many tiles pays per tile). Same bytes as cat_file: a short read at the end.
            return _read_local_range(full, start, end)
        if _plain(start, end):
            try:
                data: bytes = self.fs.cat_file(full, start=start, end=end)
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                size = int(self.fs.size(full))  # a range that starts at or past the end (HTTP 416)
                return _empty_range_or_raise(exc, start, end, size)
            return data
        first, stop, _ = slice(start, end).indices(int(self.fs.size(full)))
        data = self.fs.cat_file(full, start=first, end=stop) if stop > first else b""
        return data

    async def _read_async(self, path: str, start: int | None, end: int | None) -> bytes:
        fs, full = self.fs, self._full(path)
        if start is None and end is None and _internals.s3fs_reads_in_one_request(fs):
            return await _internals.fsspec_cat_file(fs, full, max_concurrency=1)  # one GET, no HEAD for the size
        if not _plain(start, end):
            first, stop, _ = slice(start, end).indices(await _internals.fsspec_size(fs, full))
            if stop <= first:
                return b""
            start, end = first, stop
        if start is not None and end is not None and start >= end:
            return b""
        try:
            data = await _internals.fsspec_cat_file(fs, full, start=start, end=end)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            # a range that starts at or past the end (S3: 416 InvalidRange)
            size = await _internals.fsspec_size(fs, full)
            return _empty_range_or_raise(exc, start, end, size)
        return data

    async def _bounded(self, path: str, attempt: Callable[[], Awaitable[T]]) -> T:
        """Run ``attempt`` under the store's bound on requests in flight, with retries and a timeout."""
        loop = asyncio.get_running_loop()
        limit = self._limits.get(loop)
        if limit is None:
            limit = self._limits[loop] = asyncio.Semaphore(self.io_concurrency)
        policy = self.retry
        where = self._where(path)
        number = 1
        while True:
            try:
                async with limit:
                    if policy.timeout is None:
                        return await attempt()
                    return await asyncio.wait_for(attempt(), policy.timeout)
            except Exception as exc:
                if number >= policy.attempts or not is_transient(exc):
                    raise translate(exc, where, attempts=number, timeout=policy.timeout) from exc
            await asyncio.sleep(policy.delay(number))
            number += 1

    def _retrying(self, path: str, attempt: Callable[[], T]) -> T:
        """Run the blocking ``attempt`` with the retries of ``retry`` (no timeout of ours: the call blocks)."""
        policy = self.retry
        number = 1
        while True:
            try:
                return attempt()
            except Exception as exc:
                if number >= policy.attempts or self.is_local or not is_transient(exc):
                    raise translate(exc, self._where(path), attempts=number) from exc
            time.sleep(policy.delay(number))
            number += 1

    def size(self, path: str) -> int:
        """Size in bytes of object ``path``.

        Raises
        ------
        MissingObjectError
            If the object does not exist.
        """
        return self._retrying(path, lambda: int(self.fs.size(self._full(path))))

    def exists(self, path: str) -> bool:
        """Whether ``path`` is an object or a directory (a prefix with objects under it on object stores)."""
        return bool(self.fs.exists(self._full(path)))

    def list(self, prefix: str = "") -> list[str]:
        """Sorted names (relative to ``prefix``) of the entries directly under ``prefix``; empty if absent."""
        full = self._full(prefix)
        try:
            entries = self.fs.ls(full, detail=False)
        except (FileNotFoundError, NotADirectoryError):
            return []
        base = f"{full}/"
        names = set()
        for entry in entries:
            name = str(entry).rstrip("/")
            if name == full:  # ``prefix`` is an object
                continue
            name = name[len(base) :] if name.startswith(base) else name.rsplit("/", 1)[-1]
            if name:
                names.add(name)
        return sorted(names)

    def objects_under(self, prefix: str = "") -> builtins.list[StoredObject]:
        """Every object at or under ``prefix`` with its size and modification time: one ``find`` (a LIST)."""
        full = self._full(prefix)
        try:
            found = self._retrying(prefix, lambda: self.fs.find(full, detail=True, withdirs=False))
        except (FileNotFoundError, NotADirectoryError):
            return []
        base = f"{self.root}/" if self.root else ""
        objects = []
        for name, info in found.items():
            name = str(name).rstrip("/")
            if info.get("type") != "directory" and name.startswith(base):
                objects.append(StoredObject(name[len(base) :], int(info.get("size") or 0), modified_of(info)))
        return sorted(objects, key=lambda o: o.path)

    # ------------------------------------------------------------------------------------- writes

    def write(self, path: str, data: bytes) -> None:
        """Write object ``path`` whole; on a local disk through a temporary file and a rename."""
        full = self._full(path)
        if not isinstance(data, bytes | bytearray):
            data = bytes(data)  # botocore takes bytes, bytearray or a file, not a memoryview
        if self.is_async:
            self.submit_write(path, data).result()
            return
        if not self.is_local:
            self._retrying(path, lambda: self.fs.pipe_file(full, data))
            return
        os.makedirs(os.path.dirname(full), exist_ok=True)
        _write_file(full, data)

    def write_many(self, objects: Mapping[str, bytes]) -> None:
        """Write every object of ``objects``, each whole (see :meth:`~deltacells.storage.BaseStore.write_many`).

        On a local disk one after the other in the calling thread, each directory made once: a small file takes
        tens of microseconds there, and threads would contend for the interpreter and the directories' locks.
        Elsewhere all at once, as concurrent requests.
        """
        if not self.is_local or self.is_async:
            super().write_many(objects)
            return
        files = {self._full(path): data for path, data in objects.items()}
        for directory in sorted({os.path.dirname(full) for full in files}):
            os.makedirs(directory, exist_ok=True)
        for full, data in files.items():
            _write_file(full, data)

    def submit_write(self, path: str, data: bytes) -> Future[None]:
        """Start a write (see ``submit_read``); an object appears whole or not at all."""
        if not self.is_async:
            return super().submit_write(path, data)
        if not isinstance(data, bytes | bytearray):
            data = bytes(data)  # botocore takes bytes, bytearray or a file, not a memoryview
        full = self._full(path)
        return asyncio.run_coroutine_threadsafe(
            self._bounded(path, lambda: self.fs._pipe_file(full, data)), self.fs.loop
        )

    def delete(self, path: str) -> None:
        """Remove object ``path`` or everything under prefix ``path``; nothing happens when absent.

        On a local disk, emptied parent directories stay.
        """
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(self._full(path), recursive=True)

    def move(self, src: str, dst: str) -> None:
        """Rename object or prefix ``src`` to ``dst`` (see :meth:`BaseStore.move`).

        A rename on a local disk; on object stores, a copy of each object then a delete, so
        readers may briefly see both. The check that ``dst`` is free is not atomic with the move.
        """
        source, target = self._full(src), self._full(dst)
        if not self.exists(src):
            raise self._missing(src)
        if self.exists(dst):
            msg = f"cannot move {self._where(src)} to {self._where(dst)}: the destination exists"
            raise OutputExistsError(msg)
        if self.is_local:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.replace(source, target)
            return
        fs = self.fs
        if fs.isfile(source):
            fs.cp_file(source, target)
            fs.rm(source)
            return
        sources = [str(name) for name in fs.find(source)]
        if sources:
            fs.copy(sources, [target + name[len(source) :] for name in sources])
        fs.rm(source, recursive=True)

    def replace(self, src: str, dst: str) -> None:
        """Move object ``src`` to ``dst``, replacing it: a rename on a local disk, a copy then a delete elsewhere.

        Raises
        ------
        MissingObjectError
            If ``src`` does not exist.
        """
        source, target = self._full(src), self._full(dst)
        if self.is_local:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            try:
                os.replace(source, target)
            except FileNotFoundError as exc:
                raise self._missing(src) from exc
            return
        try:
            self._retrying(src, lambda: self.fs.cp_file(source, target))
        except FileNotFoundError as exc:
            raise self._missing(src) from exc
        self.delete(src)

    # --------------------------------------------------------------------------- conditional writes

    @property
    def _on_s3(self) -> bool:
        return fsspec.utils.get_protocol(self.url) in ("s3", "s3a")

    @property
    def atomic_conditional_writes(self) -> bool:
        """True on S3 (a PUT with ``If-Match`` / ``If-None-Match``), False elsewhere."""
        return self._on_s3

    def read_versioned(self, path: str) -> tuple[bytes, str]:
        """Object ``path`` and its version tag: S3's ETag from the same GET, elsewhere the SHA-256 of the bytes.

        Raises
        ------
        MissingObjectError
            If the object does not exist.
        """
        if not self._on_s3:
            return super().read_versioned(path)
        bucket, key, _ = self.fs.split_path(self._full(path))

        async def get() -> tuple[bytes, str]:
            await self.fs.set_session()
            s3 = await self.fs.get_s3(bucket)
            response = await s3.get_object(Bucket=bucket, Key=key)
            async with response["Body"] as body:
                data = await body.read()
            return bytes(data), str(response["ETag"])

        return asyncio.run_coroutine_threadsafe(self._bounded(path, get), self.fs.loop).result()

    def version_tag(self, path: str) -> str | None:
        """The version tag of object ``path`` (S3: its ETag, from a HEAD), or None if it does not exist."""
        if not self._on_s3:
            return super().version_tag(path)
        bucket, key, _ = self.fs.split_path(self._full(path))

        async def head() -> str | None:
            from botocore.exceptions import ClientError

            await self.fs.set_session()
            s3 = await self.fs.get_s3(bucket)
            try:
                response = await s3.head_object(Bucket=bucket, Key=key)
            except ClientError as exc:
                status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
                if status == 404 or exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                    return None
                raise
            return str(response["ETag"])

        return asyncio.run_coroutine_threadsafe(self._bounded(path, head), self.fs.loop).result()

    def write_if(self, path: str, data: bytes, *, version: str | None) -> str:
        """Write ``path`` only if it is still at ``version`` (``None``: only if absent); atomic on S3.

        On S3 one PUT with ``If-Match: <ETag>`` (or ``If-None-Match: *``), which the server refuses (412, or
        409 when two such writes race) if the object changed; elsewhere ``BaseStore.write_if``.

        Returns
        -------
        str
            The version tag of what was written (S3: its ETag).

        Raises
        ------
        CommitConflictError
            If the object changed since it was read: nothing was written.
        """
        if not self._on_s3:
            return super().write_if(path, data, version=version)
        bucket, key, _ = self.fs.split_path(self._full(path))
        condition = {"IfNoneMatch": "*"} if version is None else {"IfMatch": version}

        async def put() -> str:
            from botocore.exceptions import ClientError

            await self.fs.set_session()
            s3 = await self.fs.get_s3(bucket)
            try:
                response = await s3.put_object(Bucket=bucket, Key=key, Body=data, **condition)
            except ClientError as exc:
                error = exc.response.get("Error", {})
                status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
                if error.get("Code") in ("PreconditionFailed", "ConditionalRequestConflict") or status in (409, 412):
                    raise self._conflict(path) from exc
                if version is not None and error.get("Code") in ("NoSuchKey", "404"):
                    raise self._conflict(path) from exc
                raise
            self.fs.invalidate_cache(self._full(path))
            return str(response["ETag"])

        return asyncio.run_coroutine_threadsafe(self._bounded(path, put), self.fs.loop).result()

    def path(self, name: str) -> str:
        """Full path of ``name`` inside :attr:`fs` (what fsspec calls it)."""
        return self._full(name)

    def fsspec_location(self, path: str) -> tuple[str, dict[str, Any]]:
        """The URL of ``path`` and this store's options, for a library that reads it itself (zarr).

        With deltacells' default timeouts; on s3, botocore's own retries are kept (deltacells' retry policy
        does not wrap the library's reads) and an object is read in one GET (s3fs's ``max_concurrency=1``:
        otherwise it asks the object's size first, a HEAD per object).
        """
        protocol = fsspec.utils.get_protocol(self.url)
        options = with_default_timeouts(protocol, self.storage_options)
        if protocol in ("s3", "s3a"):
            if "retries" not in dict(self.storage_options.get("config_kwargs") or {}):
                options["config_kwargs"].pop("retries", None)
            if "max_concurrency" in _s3fs_options():
                options.setdefault("max_concurrency", 1)
        return f"{self.url.rstrip('/')}/{path}", options


def _s3fs_options() -> frozenset[str]:
    """The keyword arguments of s3fs's filesystem (``max_concurrency`` came with s3fs 2024.3)."""
    import inspect

    from s3fs import S3FileSystem

    return frozenset(inspect.signature(S3FileSystem.__init__).parameters)


def _rebuild(
    cls: type[FsspecStore],
    url: str,
    storage_options: dict[str, Any],
    io_concurrency: int | None,
    retry: RetryPolicy,
) -> FsspecStore:
    store = cls(url, storage_options)  # subclasses keep their two-argument constructor
    store._io_concurrency = io_concurrency
    store.retry = retry
    return store


def _write_file(full: str, data: bytes) -> None:
    """Write local file ``full`` (its directory exists) through a temporary file and a rename: whole or not at all."""
    tmp = f"{full}.{uuid.uuid4().hex}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, full)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise
