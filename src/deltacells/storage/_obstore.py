"""A store over obstore (Rust's ``object_store``) for ``s3://``, ``gs://`` and ``az://`` URLs.

obstore signs, sends and parses a request in Rust, with the GIL released: a GET costs the client a fraction of
the CPU botocore's does (``benchmarks/bench_s3_clients.py``), which is what a remote scan of many tiles and
the opening of a collection of many datasets pay for. Reads that may run many at once (:meth:`submit_read`,
:meth:`submit_read_buffer`, :meth:`read_many`) are obstore's coroutines on one event loop thread of the process
(``deltacells.storage._loop``): no Python thread per request, and the object's bytes handed over as obstore
holds them (a tile is not copied). Single reads, writes, listings and HEADs are obstore's blocking calls. One
obstore store (one connection pool) serves every dataset of a bucket with the same options, in each process;
the :class:`ObstoreStore` pickles to its URL and options, as every store does.

obstore is not fork-safe: its Rust runtime's threads are not in a forked child, and the child's first request
waits for them forever (a torch ``DataLoader``'s workers, a ``multiprocessing`` pool started by fork). So in a
child forked from a process that used obstore, an :class:`ObstoreStore` passes every call to an
:class:`FsspecStore` of the same URL and options (s3fs, gcsfs or adlfs: fsspec makes its event loop anew after a
fork); a spawned process (a fresh interpreter) uses obstore again.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import functools
import os
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping
from concurrent.futures import Future
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, cast

from deltacells._checks import check_integer
from deltacells.errors import OutputExistsError
from deltacells.storage._base import DEFAULT_IO_CONCURRENCY, BaseStore, ByteRequest, ReadBuffer
from deltacells.storage._faults import RetryPolicy, is_transient, response_status, translate
from deltacells.storage._fsspec import DEFAULT_TIMEOUTS, FsspecStore
from deltacells.storage._loop import io_loop
from deltacells.storage._objects import StoredObject, modified_of
from deltacells.storage._obstore_options import ObstoreSettings, obstore_settings, split_url

__all__ = ["ObstoreStore"]

T = TypeVar("T")

#: obstore's stores by process, kind, bucket and settings: the datasets of a bucket share one connection pool.
_STORES: dict[tuple[int, str], Any] = {}
_STORES_LOCK = threading.Lock()

#: The process that made the first obstore store (its runtime may have started there), or None.
_USED_BY: int | None = None


def obstore_unusable() -> bool:
    """Whether this process was forked from one that used obstore (whose runtime does not work here)."""
    return _USED_BY is not None and os.getpid() != _USED_BY


def _fsspec_after_fork(method: Callable[..., T]) -> Callable[..., T]:
    """``method`` of :class:`ObstoreStore`, or the same method of its fsspec store in a forked child."""
    name = method.__name__

    @functools.wraps(method)
    def chosen(self: ObstoreStore, *args: Any, **kwargs: Any) -> T:
        fallback = self._forked_fallback()
        if fallback is not None:
            result: T = getattr(fallback, name)(*args, **kwargs)
            return result
        return method(self, *args, **kwargs)

    return chosen


def _obstore_store(settings: ObstoreSettings) -> Any:
    """Obstore's store for ``settings``, made once per process (its pool and credentials are shared)."""
    global _USED_BY
    if _USED_BY is None:
        _USED_BY = os.getpid()
    key = (os.getpid(), repr((settings.kind, sorted(settings.config.items()), sorted(settings.client.items()))))
    with _STORES_LOCK:
        found = _STORES.get(key)
    if found is not None:
        return found
    from obstore.store import AzureStore, GCSStore, S3Store

    config = dict(settings.config)
    extra: dict[str, Any] = {}
    if settings.botocore_profile is not None:
        provider = _botocore_credentials(settings.botocore_profile)
        if provider is not None:
            extra["credential_provider"] = provider
            if "region" not in config and provider.region:
                config["region"] = provider.region
    kinds = {"s3": S3Store, "gcs": GCSStore, "azure": AzureStore}
    made = kinds[settings.kind](
        config=config,
        client_options=settings.client,
        retry_config={"max_retries": 0},  # deltacells' RetryPolicy retries, for every client alike
        **extra,
    )
    with _STORES_LOCK:
        return _STORES.setdefault(key, made)


class _BotocoreCredentials:
    """obstore's S3 credentials from botocore's chain (profiles, ``~/.aws``, SSO, the instance's role), as s3fs's."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.region: str | None = session.get_config_variable("region")

    def __call__(self) -> dict[str, Any]:
        credentials = self.session.get_credentials()
        if credentials is None:
            msg = "no AWS credentials found (environment, ~/.aws, profile, instance role): give key and secret"
            raise PermissionError(msg)
        frozen = credentials.get_frozen_credentials()
        refreshable = getattr(credentials, "refresh_needed", None) is not None
        # botocore refreshes temporary credentials itself: obstore asks again every few minutes
        expires = datetime.now(UTC) + timedelta(minutes=5) if refreshable else None
        return {
            "access_key_id": frozen.access_key,
            "secret_access_key": frozen.secret_key,
            "token": frozen.token,
            "expires_at": expires,
        }


def _botocore_credentials(profile: str) -> _BotocoreCredentials | None:
    """A credential provider from botocore's chain with ``profile`` (``""``: the default); None without botocore."""
    try:
        import botocore.session
    except ImportError:
        return None
    session = botocore.session.Session(profile=profile or None)
    if session.get_credentials() is None:
        return None  # nothing found: obstore's own chain (environment, instance metadata) decides
    return _BotocoreCredentials(session)


#: How one GET asks for ``[start, end)`` (:func:`_plan`): the whole object, a bounded range, an offset or a
#: suffix (obstore's range options), or None: the size is needed first (a HEAD).
_Plan = tuple[str, Any] | None


#: The bytes a read of a whole object asks for first (``_get_whole_async``): manifests, gene tables, obs schemas.
_FIRST_BYTES = 1 << 20


def _plan(start: int | None, end: int | None) -> _Plan:
    """How to read ``[start, end)`` of an object with one GET, or None when its size must be asked first."""
    if start is None and end is None:
        return ("whole", None)
    if (end is not None and end < 0) or (start is not None and start < 0 and end is not None):
        return None
    if end is None:
        assert start is not None
        return ("options", {"range": {"offset": start} if start >= 0 else {"suffix": -start}})
    if (start or 0) >= end:
        return None  # empty: only whether the object exists
    return ("range", (start or 0, end))


def _is_range_refused(exc: BaseException) -> bool:
    """Whether obstore refused a range as empty or past the end (HTTP 416, a range it would not send)."""
    text = str(exc)
    return isinstance(exc, ValueError) or "416" in text or "InvalidRange" in text or "non-partial response" in text


class ObstoreStore(BaseStore):
    """The objects of one dataset root in a bucket, read and written through obstore.

    Chosen by :func:`~deltacells.storage.open_store` for ``s3://``, ``s3a://``, ``gs://``, ``gcs://`` and ``az://``
    URLs when obstore is installed and the options map (see ``deltacells.storage._obstore_options``); the
    environment variable ``DELTACELLS_STORAGE_CLIENT=fsspec`` makes it choose :class:`FsspecStore` instead.

    Parameters
    ----------
    url
        ``s3://bucket/prefix`` (or ``gs://``, ``az://``...).
    storage_options
        The options of s3fs, gcsfs or adlfs (credentials, endpoint, timeouts), mapped to obstore's.
    io_concurrency
        The most requests in flight at once (default 32).
    retry
        How transient failures (5xx, throttling, dropped connections, timeouts) are retried; its ``timeout`` is
        the most one request may take.

    Raises
    ------
    UnmappedOptionError
        For an option obstore cannot express (an ``InvalidValueError``); an :class:`FsspecStore` takes it.
    """

    def __init__(
        self,
        url: str,
        storage_options: Mapping[str, Any] | None = None,
        *,
        io_concurrency: int | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        if io_concurrency is not None:
            io_concurrency = check_integer("io_concurrency", io_concurrency, minimum=1)
        self._io_concurrency = io_concurrency
        self.retry = retry or RetryPolicy()
        self.url = str(url).rstrip("/")
        self.storage_options = dict(storage_options or {})
        self.scheme, self.bucket, self.root = split_url(self.url)
        self.settings = obstore_settings(
            self.url, self.storage_options, timeouts=DEFAULT_TIMEOUTS, total_timeout=self.retry.timeout
        )
        self._pid: int | None = None
        self._store: Any = None

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.url, self.storage_options, self._io_concurrency, self.retry))

    @property
    def io_concurrency(self) -> int:
        """The most requests in flight at once (``io_concurrency=``, or 32)."""
        return self._io_concurrency if self._io_concurrency is not None else DEFAULT_IO_CONCURRENCY

    @property
    def store(self) -> Any:
        """Obstore's store of the bucket, made on first use in each process."""
        if self._store is None or self._pid != os.getpid():
            self._store = _obstore_store(self.settings)
            self._pid = os.getpid()
        return self._store

    def _forked_fallback(self) -> FsspecStore | None:
        """The fsspec store that serves this one in a child forked after obstore was used (else None)."""
        if not obstore_unusable():
            return None
        found = self.__dict__.get("_fallback")
        if found is None or found[0] != os.getpid():
            options = (self.url, self.storage_options)
            found = (os.getpid(), FsspecStore(*options, io_concurrency=self._io_concurrency, retry=self.retry))
            self.__dict__["_fallback"] = found
        fallback: FsspecStore = found[1]
        return fallback

    def _key(self, path: str) -> str:
        """The object key of ``path`` in the bucket."""
        path = path.strip("/")
        if not self.root:
            return path
        return f"{self.root}/{path}" if path else self.root

    def _retrying(self, path: str, attempt: Callable[[], T]) -> T:
        """Run ``attempt`` with the retries of ``retry``; errors become deltacells' errors naming the object."""
        policy = self.retry
        number = 1
        while True:
            try:
                return attempt()
            except Exception as exc:
                if number >= policy.attempts or not is_transient(exc):
                    raise translate(exc, self._where(path), attempts=number, timeout=policy.timeout) from exc
            time.sleep(policy.delay(number))
            number += 1

    # -------------------------------------------------------------------------------------- reads

    @_fsspec_after_fork
    def read(self, path: str, start: int | None = None, end: int | None = None) -> bytes:
        """The bytes ``[start, end)`` of object ``path`` (see :meth:`~deltacells.storage.BaseStore.read`).

        One GET: the whole object, a range (``0, size`` with the size from the manifest), an offset or a
        suffix; a HEAD first only for a range whose end counts from the end of the object, and after a range
        the server refused as past the end (the empty result then needs the object to exist).
        """
        return self._retrying(path, lambda: self._read(path, start, end))

    def _read(self, path: str, start: int | None, end: int | None) -> bytes:
        import obstore

        key, plan = self._key(path), _plan(start, end)
        if plan is None:
            return self._read_sized(key, start, end)
        kind, arguments = plan
        if kind == "whole":
            return bytes(obstore.get(self.store, key).bytes())
        try:
            if kind == "range":
                return bytes(obstore.get_range(self.store, key, start=arguments[0], end=arguments[1]))
            return bytes(obstore.get(self.store, key, options=arguments).bytes())
        except Exception as exc:
            if not _is_range_refused(exc):
                raise
        return self._read_sized(key, start, end)

    def _read_sized(self, key: str, start: int | None, end: int | None) -> bytes:
        """``[start:end]`` of object ``key`` with its size asked first (a HEAD)."""
        import obstore

        first, stop, _ = slice(start, end).indices(int(obstore.head(self.store, key)["size"]))
        if stop <= first:
            return b""
        return bytes(obstore.get_range(self.store, key, start=first, end=stop))

    # ------------------------------------------------------------------------ reads on the event loop

    @property
    def reads_asynchronously(self) -> bool:
        """Reads started with :meth:`submit_read` are coroutines of an event loop here (fsspec's after a fork)."""
        fallback = self._forked_fallback()
        return True if fallback is None else fallback.reads_asynchronously

    @_fsspec_after_fork
    def submit_read(self, path: str, start: int | None = None, end: int | None = None) -> Future[bytes]:
        """Start a read (a coroutine on the process's I/O event loop); at most ``io_concurrency`` in flight."""
        return self._submit(self._read_bytes(path, start, end))

    @_fsspec_after_fork
    def submit_read_buffer(self, path: str, start: int | None = None, end: int | None = None) -> Future[ReadBuffer]:
        """Start a read whose result is a read-only view of obstore's buffer: the object is not copied."""
        return self._submit(self._read_view(path, start, end))

    @_fsspec_after_fork
    def read_many(self, requests: Iterable[ByteRequest], *, max_workers: int | None = None) -> list[bytes]:
        """Many objects or ranges at once, in request order: one coroutine on the I/O event loop for them all.

        At most ``max_workers`` (default, and at most, :attr:`io_concurrency`) in flight; after a failure no new
        request starts, and the first failure in request order is raised.
        """
        wanted = list(requests)
        if len(wanted) <= 1:
            return [self.read(path, start, end) for path, start, end in wanted]
        window = max(1, min(max_workers or self.io_concurrency, self.io_concurrency))
        future = self._submit(self._read_all(wanted, window))
        try:
            return future.result()
        finally:
            future.cancel()  # the caller gave up (an interrupt): nothing goes on running for it

    def _submit(self, coroutine: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coroutine, io_loop())

    def _limit(self) -> asyncio.Semaphore:
        """The bound on this store's requests in flight (``io_concurrency``), made on the loop in each process."""
        found = self.__dict__.get("_limits")
        if found is None or found[0] != os.getpid():
            found = (os.getpid(), asyncio.Semaphore(self.io_concurrency))
            self.__dict__["_limits"] = found
        limit: asyncio.Semaphore = found[1]
        return limit

    async def _read_bytes(self, path: str, start: int | None, end: int | None) -> bytes:
        return bytes(await self._read_async(path, start, end))

    async def _read_view(self, path: str, start: int | None, end: int | None) -> ReadBuffer:
        got = await self._read_async(path, start, end)
        return got if isinstance(got, bytes) else memoryview(got)

    async def _read_all(self, requests: list[ByteRequest], window: int) -> list[bytes]:
        started = asyncio.Semaphore(window)
        failed = False

        async def one(path: str, start: int | None, end: int | None) -> bytes | None:
            nonlocal failed
            async with started:
                if failed:
                    return None
                try:
                    return bytes(await self._read_async(path, start, end))
                except BaseException:
                    failed = True
                    raise

        got = await asyncio.gather(*(one(*request) for request in requests), return_exceptions=True)
        for result in got:
            if isinstance(result, BaseException):
                raise result
        return cast("list[bytes]", got)

    async def _read_async(self, path: str, start: int | None, end: int | None) -> Any:
        """``[start, end)`` of ``path`` as obstore's bytes, with the retries of ``retry``; errors translated."""
        policy = self.retry
        number = 1
        async with self._limit():
            while True:
                try:
                    return await self._get_async(self._key(path), start, end)
                except Exception as exc:
                    if number >= policy.attempts or not is_transient(exc):
                        raise translate(exc, self._where(path), attempts=number, timeout=policy.timeout) from exc
                await asyncio.sleep(policy.delay(number))
                number += 1

    async def _get_whole_async(self, key: str) -> Any:
        """Object ``key`` whole, as a range of its first :data:`_FIRST_BYTES` when it is no longer.

        One await, where a plain GET takes two (the response, then its body): a manifest or a gene table costs
        the client less. A longer object is read again with a plain GET (never joined from two reads, which a
        rewrite in between could tear), and so is an empty one, whose range the server refuses.
        """
        import obstore

        try:
            head = await obstore.get_range_async(self.store, key, start=0, end=_FIRST_BYTES)
        except Exception as exc:
            if not _is_range_refused(exc):
                raise
        else:
            if len(head) < _FIRST_BYTES:
                return head
        return await (await obstore.get_async(self.store, key)).bytes_async()

    async def _get_async(self, key: str, start: int | None, end: int | None) -> Any:
        """One GET of ``key`` as :meth:`_read` makes it (a HEAD first where the size is needed)."""
        import obstore

        plan = _plan(start, end)
        if plan is not None:
            kind, arguments = plan
            if kind == "whole":
                return await self._get_whole_async(key)
            try:
                if kind == "range":
                    return await obstore.get_range_async(self.store, key, start=arguments[0], end=arguments[1])
                return await (await obstore.get_async(self.store, key, options=arguments)).bytes_async()
            except Exception as exc:
                if not _is_range_refused(exc):
                    raise
        meta = await obstore.head_async(self.store, key)
        first, stop, _ = slice(start, end).indices(int(meta["size"]))
        if stop <= first:
            return b""
        return await obstore.get_range_async(self.store, key, start=first, end=stop)

    @_fsspec_after_fork
    def size(self, path: str) -> int:
        """Size in bytes of object ``path`` (a HEAD).

        Raises
        ------
        MissingObjectError
            If the object does not exist.
        """
        import obstore

        return self._retrying(path, lambda: int(obstore.head(self.store, self._key(path))["size"]))

    @_fsspec_after_fork
    def exists(self, path: str) -> bool:
        """Whether ``path`` is an object (a HEAD) or a prefix with objects under it (a LIST)."""
        import obstore

        if path.strip("/"):
            try:
                self._retrying(path, lambda: obstore.head(self.store, self._key(path)))
            except FileNotFoundError:
                pass
            else:
                return True
        return bool(self.list(path))

    @_fsspec_after_fork
    def list(self, prefix: str = "") -> list[str]:
        """Sorted names (relative to ``prefix``) of the entries directly under ``prefix``; empty if absent."""
        import obstore

        key = self._key(prefix)
        found = self._retrying(prefix, lambda: obstore.list_with_delimiter(self.store, key or None))
        base = f"{key}/" if key else ""
        names = {str(name)[len(base) :] for name in found["common_prefixes"]}
        names.update(str(meta["path"])[len(base) :] for meta in found["objects"])
        return sorted(name.strip("/") for name in names if name.strip("/"))

    def _keys_under(self, path: str) -> builtins.list[str]:
        """Every object key under prefix ``path`` (not ``path`` itself)."""
        import obstore

        key = self._key(path)

        def collect() -> builtins.list[str]:
            return [str(meta["path"]) for meta in obstore.list(self.store, key or None).collect()]

        return [name for name in self._retrying(path, collect) if name != key]

    @_fsspec_after_fork
    def objects_under(self, prefix: str = "") -> builtins.list[StoredObject]:
        """Every object at or under ``prefix`` with its size and modification time: one paged LIST."""
        import obstore

        key = self._key(prefix)

        def collect() -> builtins.list[Any]:
            found = list(obstore.list(self.store, key or None).collect())
            if key:
                with contextlib.suppress(FileNotFoundError):
                    found.append(obstore.head(self.store, key))  # ``prefix`` an object itself
            return found

        base = f"{self.root}/" if self.root else ""
        objects = {}
        for meta in self._retrying(prefix, collect):
            name = str(meta["path"])
            if name.startswith(base) and (not key or name == key or name.startswith(f"{key}/")):
                objects[name] = StoredObject(name[len(base) :], int(meta["size"]), modified_of(meta))
        return sorted(objects.values(), key=lambda o: o.path)

    # ------------------------------------------------------------------------------------- writes

    @_fsspec_after_fork
    def write(self, path: str, data: bytes) -> None:
        """Write object ``path`` whole: one PUT (obstore's multipart upload above 5 MiB), atomic either way."""
        import obstore

        self._retrying(path, lambda: obstore.put(self.store, self._key(path), data))

    @_fsspec_after_fork
    def submit_write(self, path: str, data: bytes) -> Future[None]:
        """Start a write on the store's I/O threads."""
        return self._io_pool().submit(self.write, path, data)

    @_fsspec_after_fork
    def delete(self, path: str) -> None:
        """Remove object ``path`` and everything under prefix ``path``; nothing happens when absent."""
        import obstore

        keys = self._keys_under(path)
        if path.strip("/"):
            keys.append(self._key(path))
        if not keys:
            return

        def remove() -> None:
            with contextlib.suppress(FileNotFoundError):  # GCS and Azure refuse an absent object
                obstore.delete(self.store, keys)

        self._retrying(path, remove)

    @_fsspec_after_fork
    def replace(self, src: str, dst: str) -> None:
        """Move object ``src`` to ``dst``, replacing it: a copy on the server, then a delete.

        Raises
        ------
        MissingObjectError
            If ``src`` does not exist.
        """
        import obstore

        self._retrying(src, lambda: obstore.copy(self.store, self._key(src), self._key(dst)))
        self._retrying(src, lambda: obstore.delete(self.store, self._key(src)))

    @_fsspec_after_fork
    def move(self, src: str, dst: str) -> None:
        """Rename object or prefix ``src`` to ``dst`` (see :meth:`BaseStore.move`): copies on the server, deletes.

        The check that ``dst`` is free is not atomic with the move.
        """
        import obstore

        if not self.exists(src):
            raise self._missing(src)
        if self.exists(dst):
            msg = f"cannot move {self._where(src)} to {self._where(dst)}: the destination exists"
            raise OutputExistsError(msg)
        source, target = self._key(src), self._key(dst)
        keys = self._keys_under(src) or [source]
        pool = self._io_pool()

        def copy(key: str) -> None:
            self._retrying(src, lambda: obstore.copy(self.store, key, target + key[len(source) :]))

        for future in [pool.submit(copy, key) for key in keys]:
            future.result()
        self.delete(src)

    # ------------------------------------------------------------------------------ conditional writes

    @property
    def atomic_conditional_writes(self) -> bool:
        """True here, the server decides a PUT with ``If-Match`` or ``If-None-Match`` (GCS, its generation).

        In a child forked after obstore was used, what its fsspec store says.
        """
        fallback = self._forked_fallback()
        return True if fallback is None else fallback.atomic_conditional_writes

    @_fsspec_after_fork
    def read_versioned(self, path: str) -> tuple[bytes, str]:
        """Object ``path`` and its version tag (its ETag, and its version where the store has one), in one GET.

        Raises
        ------
        MissingObjectError
            If the object does not exist.
        """
        import obstore

        def get() -> tuple[bytes, str]:
            result = obstore.get(self.store, self._key(path))
            return bytes(result.bytes()), _tag(result.meta)

        return self._retrying(path, get)

    @_fsspec_after_fork
    def version_tag(self, path: str) -> str | None:
        """The version tag of object ``path`` (from a HEAD), or None if it does not exist."""
        import obstore

        try:
            meta = self._retrying(path, lambda: obstore.head(self.store, self._key(path)))
        except FileNotFoundError:
            return None
        return _tag(meta)

    @_fsspec_after_fork
    def write_if(self, path: str, data: bytes, *, version: str | None) -> str:
        """Write ``path`` only if it is still at ``version`` (``None``: only if absent), atomically on the server.

        obstore's put modes: ``"create"`` (``If-None-Match: *``) or an update of the ETag and version read
        (``If-Match``; GCS's generation); the server refuses the write (412, or 409 when two race) if the object
        changed.

        Returns
        -------
        str
            The version tag of what was written.

        Raises
        ------
        CommitConflictError
            If the object changed (or exists, or was removed) since it was read: nothing was written.
        """
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        mode: Any = "create" if version is None else _update_mode(version)

        def put() -> dict[str, Any]:
            try:
                written: dict[str, Any] = obstore.put(self.store, self._key(path), data, mode=mode)  # type: ignore[assignment]
            except (AlreadyExistsError, PreconditionError) as exc:  # 412 (S3: 404 for an update of none)
                raise self._conflict(path) from exc
            except Exception as exc:
                if response_status(exc) == 409:  # two conditional writes raced
                    raise self._conflict(path) from exc
                raise
            return written

        return _tag(self._retrying(path, put))

    def fsspec_location(self, path: str) -> tuple[str, dict[str, Any]]:
        """The URL of ``path`` and fsspec's options for it (the storage options are fsspec's), for zarr."""
        return FsspecStore(self.url, self.storage_options).fsspec_location(path)


def _tag(meta: Mapping[str, Any]) -> str:
    """The version tag of an object: its ETag, and ``#`` and its version where the store keeps versions."""
    e_tag, version = meta.get("e_tag"), meta.get("version")
    return f"{e_tag}#{version}" if version else str(e_tag)


def _update_mode(tag: str) -> dict[str, str]:
    """Obstore's put mode that updates the object only if it is still at version tag ``tag``."""
    e_tag, _, version = tag.partition("#")
    mode = {"e_tag": e_tag}
    if version:
        mode["version"] = version
    return mode


def _rebuild(url: str, storage_options: dict[str, Any], io_concurrency: int | None, retry: RetryPolicy) -> ObstoreStore:
    return ObstoreStore(url, storage_options, io_concurrency=io_concurrency, retry=retry)
