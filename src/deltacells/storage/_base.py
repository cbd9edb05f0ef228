"""The interface every store implements: whole and ranged reads, atomic writes, listing, deletion, moves.

Paths are relative to the store's root and ``/``-separated; ``""`` is the root itself. A store
pickles to its constructor arguments (a URL and options), never to an open handle, so that dask
workers and data-loader processes each open their own connection.
"""

from __future__ import annotations

import abc
import builtins
import contextlib
import os
import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, cast

from deltacells.errors import CommitConflictError, MissingObjectError
from deltacells.storage._durable import fsync_tree
from deltacells.storage._file import StoreFile
from deltacells.storage._objects import StoredObject

__all__ = ["DEFAULT_IO_CONCURRENCY", "BaseStore", "ByteRequest", "ReadBuffer"]

_POOL_LOCK = threading.Lock()


def _after_fork_in_child() -> None:
    global _POOL_LOCK
    _POOL_LOCK = threading.Lock()  # a parent thread may have held it at the fork


os.register_at_fork(after_in_child=_after_fork_in_child)

ByteRequest = tuple[str, int | None, int | None]
"""One request of :meth:`BaseStore.read_many`: ``(path, start, end)``, ``None`` meaning the start or end."""

ReadBuffer = bytes | memoryview
"""What :meth:`BaseStore.submit_read_buffer` gives: bytes, or a read-only view of a client's own buffer (no copy)."""

#: Requests in flight at once, by default, on object storage and other remote filesystems.
DEFAULT_IO_CONCURRENCY = 32

#: Requests in flight at once, by default, on a local disk (the page cache answers in microseconds).
DEFAULT_LOCAL_IO_CONCURRENCY = 8


class BaseStore(abc.ABC):
    """The objects of one dataset root: a local directory or a bucket prefix.

    Subclasses implement :meth:`read`, :meth:`write`, :meth:`list`, :meth:`delete`,
    :meth:`size` and :meth:`move`, set :attr:`url`, and pickle to their constructor
    arguments. :meth:`read_many`, :meth:`exists`, :attr:`is_local` and :meth:`local_path`
    have defaults that a store may override with something faster.
    """

    url: str
    """Where the store lives (a path or URL); error messages name objects as ``f"{url}/{path}"``."""

    @property
    def io_concurrency(self) -> int:
        """The most requests this store has in flight at once (``submit_read``, ``submit_write``)."""
        return DEFAULT_LOCAL_IO_CONCURRENCY if self.is_local else DEFAULT_IO_CONCURRENCY

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    # ------------------------------------------------------------------------------------------ reads

    def fsspec_location(self, path: str) -> tuple[str, dict[str, Any]]:
        """The fsspec URL of ``path`` and the options that open it, for libraries that open it themselves (zarr).

        Raises
        ------
        NotImplementedError
            For a store that is not an fsspec location (a test double, say).
        """
        msg = f"{type(self).__name__} gives no fsspec URL for {path!r}"
        raise NotImplementedError(msg)

    @abc.abstractmethod
    def read(self, path: str, start: int | None = None, end: int | None = None) -> bytes:
        """The bytes ``[start, end)`` of object ``path`` (the whole object by default).

        Parameters
        ----------
        path
            The object, relative to the root.
        start, end
            Byte offsets with the meaning of a Python slice ``data[start:end]``: ``None`` is
            the start or the end of the object, a negative value counts back from the end
            (``start=-n`` alone reads the last ``n`` bytes), and a range past the end is cut
            short, possibly to ``b""``.

        Raises
        ------
        MissingObjectError
            If the object does not exist (also for an empty range).
        """

    def read_many(self, requests: Iterable[ByteRequest], *, max_workers: int | None = None) -> list[bytes]:
        """Many objects or ranges at once: ``[self.read(*r) for r in requests]``, fetched concurrently.

        The requests go through :meth:`submit_read`, at most ``max_workers`` (default
        :attr:`io_concurrency`) at a time; after a failure no new request starts.

        Parameters
        ----------
        requests
            ``(path, start, end)`` triples, with the meaning of :meth:`read`'s arguments.
        max_workers
            The most requests in flight at once.

        Returns
        -------
        list of bytes
            One result per request, in the order of ``requests``.

        Raises
        ------
        MissingObjectError
            Naming the first missing object (in request order).
        """
        wanted = list(requests)
        window = max(1, min(max_workers or self.io_concurrency, self.io_concurrency))
        if window <= 1 or len(wanted) <= 1:
            return [self.read(path, start, end) for path, start, end in wanted]
        futures: list[Future[bytes]] = []
        results: list[bytes] = []
        try:
            for request in wanted:
                if len(futures) - len(results) >= window:
                    results.append(futures[len(results)].result())
                futures.append(self.submit_read(*request))
            results.extend(future.result() for future in futures[len(results) :])
        finally:
            for future in futures:
                future.cancel()
        return results

    def submit_read(self, path: str, start: int | None = None, end: int | None = None) -> Future[bytes]:
        """Start ``read`` apart from the calling thread; at most ``io_concurrency`` run at once.

        The default runs :meth:`read` on a thread pool of the store's own (not the decoding pool, so that
        fetching and decoding overlap); stores with an asynchronous client override it.
        """
        return self._io_pool().submit(self.read, path, start, end)

    def submit_read_buffer(self, path: str, start: int | None = None, end: int | None = None) -> Future[ReadBuffer]:
        """``submit_read`` for a caller that reads the result only through the buffer protocol (a decoder).

        The result may be a read-only ``memoryview`` of the client's own buffer rather than ``bytes``: no copy of
        the object is made (obstore's). The default is :meth:`submit_read`.
        """
        return cast("Future[ReadBuffer]", self.submit_read(path, start, end))

    @property
    def reads_asynchronously(self) -> bool:
        """Whether :meth:`submit_read` starts a coroutine rather than occupying a thread (obstore, async fsspec).

        Many requests in flight then cost little: a collection starts the small reads of all its datasets at once.
        """
        return False

    def submit_write(self, path: str, data: bytes) -> Future[None]:
        """Start ``write`` apart from the calling thread (see ``submit_read``)."""
        return self._io_pool().submit(self.write, path, data)

    def write_many(self, objects: Mapping[str, bytes]) -> None:
        """Write every object of ``objects`` (``{path: bytes}``) as ``write`` does; return once all are stored.

        The default starts them all at once (:meth:`submit_write`: concurrent requests); a local disk writes
        them one after the other instead, each directory made once (see ``FsspecStore``).

        Raises
        ------
        Exception
            The first write that failed (naming its object); the others still queued are cancelled, those under
            way waited for.
        """
        pending = [self.submit_write(path, data) for path, data in objects.items()]
        try:
            for future in pending:
                future.result()
        except BaseException:
            for future in pending:
                future.cancel()
            for future in pending:
                if not future.cancelled():
                    with contextlib.suppress(Exception):  # the first failure is the one raised
                        future.result()
            raise

    def _io_pool(self) -> ThreadPoolExecutor:
        """The store's I/O threads, created on first use in each process (never pickled)."""
        state = self.__dict__.get("_io_state")
        if state is None or state[0] != os.getpid():
            with _POOL_LOCK:
                state = self.__dict__.get("_io_state")
                if state is None or state[0] != os.getpid():
                    pool = ThreadPoolExecutor(max_workers=self.io_concurrency, thread_name_prefix="deltacells-io")
                    state = (os.getpid(), pool)
                    self.__dict__["_io_state"] = state
        return state[1]

    @abc.abstractmethod
    def size(self, path: str) -> int:
        """Size in bytes of object ``path``.

        Raises
        ------
        MissingObjectError
            If the object does not exist.
        """

    def exists(self, path: str) -> bool:
        """Whether ``path`` is an object, or a prefix with objects under it (``""``: the root).

        The default asks :meth:`size`, then :meth:`list`.
        """
        try:
            self.size(path)
        except FileNotFoundError:
            return bool(self.list(path))
        return True

    @abc.abstractmethod
    def list(self, prefix: str = "") -> list[str]:
        """Sorted names of the entries directly under ``prefix``: objects and sub-prefixes.

        Names are relative to ``prefix`` and have no trailing slash; the list is empty when
        nothing is stored under ``prefix`` (or ``prefix`` is an object).
        """

    def objects_under(self, prefix: str = "") -> builtins.list[StoredObject]:
        """Every object at or under ``prefix``, recursively, with its size and when it was last written.

        Paths are relative to the root, sorted. The default walks :meth:`list` and asks :meth:`size` of each
        object (without modification times, but on a local disk); stores override it with one recursive
        listing (a LIST of the bucket prefix, which S3 pages by 1,000 keys).
        """
        found: builtins.list[StoredObject] = []
        pending = [prefix.strip("/")]
        while pending:
            path = pending.pop()
            names = self.list(path)
            if names:
                pending.extend(f"{path}/{name}".lstrip("/") for name in names)
                continue
            try:
                size = self.size(path)
            except FileNotFoundError:  # absent, or an empty directory
                continue
            found.append(StoredObject(path, size, self._modified_locally(path)))
        return sorted(found, key=lambda o: o.path)

    def _modified_locally(self, path: str) -> float | None:
        """The modification time of ``path`` on a local disk, else None."""
        local = self.local_path(path) if self.is_local else None
        if local is None:
            return None
        try:
            return os.stat(local).st_mtime
        except OSError:
            return None

    # ----------------------------------------------------------------------------------------- writes

    @abc.abstractmethod
    def write(self, path: str, data: bytes) -> None:
        """Write object ``path`` whole, atomically: readers see the old bytes or the new, never a mix.

        Parent directories are created as needed; an existing object is replaced.
        """

    @abc.abstractmethod
    def delete(self, path: str) -> None:
        """Remove object ``path``, or everything under prefix ``path``; nothing happens when absent."""

    @abc.abstractmethod
    def move(self, src: str, dst: str) -> None:
        """Rename object or prefix ``src`` to ``dst``.

        Raises
        ------
        MissingObjectError
            If nothing exists at ``src``.
        FileExistsError
            If something exists at ``dst`` (nothing is overwritten); :class:`~deltacells.errors.OutputExistsError`
            from the stores of deltacells.
        """

    def replace(self, src: str, dst: str) -> None:
        """Move object ``src`` to ``dst``, replacing what ``dst`` holds: readers of ``dst`` see old bytes or new.

        The default reads, writes and deletes; stores override it with a rename (local disks) or a copy on
        the server (object stores).

        Raises
        ------
        MissingObjectError
            If ``src`` does not exist (nothing is changed).
        """
        self.write(dst, self.read(src))
        self.delete(src)

    # ------------------------------------------------------------------------------ conditional writes

    @property
    def atomic_conditional_writes(self) -> bool:
        """Whether ``write_if`` compares and writes in one atomic step on the server (S3's conditional PUT).

        Where it does not (a local disk, other filesystems), writers that may race take a lock around it.
        """
        return False

    def read_versioned(self, path: str) -> tuple[bytes, str]:
        """Object ``path`` and its version tag, for a later ``write_if`` (default: the SHA-256 of its bytes).

        Raises
        ------
        MissingObjectError
            If the object does not exist.
        """
        import hashlib

        data = self.read(path)
        return data, hashlib.sha256(data).hexdigest()

    def version_tag(self, path: str) -> str | None:
        """The version tag of object ``path`` (as ``read_versioned`` gives it), or None if it does not exist.

        The default reads the object; stores that can ask for the tag alone (S3: a HEAD) override it.
        """
        try:
            return self.read_versioned(path)[1]
        except FileNotFoundError:
            return None

    def write_if(self, path: str, data: bytes, *, version: str | None) -> str:
        """Write ``path`` only if it is still at ``version`` (from ``read_versioned``; ``None``: only if absent).

        Atomic where :attr:`atomic_conditional_writes` says so; otherwise a read, a comparison and a write,
        which callers serialise with a lock.

        Returns
        -------
        str
            The version tag of what was written.

        Raises
        ------
        CommitConflictError
            If the object changed (or exists, or was removed) since: nothing was written.
        """
        try:
            current = self.read_versioned(path)[1]
        except FileNotFoundError:
            current = None
        if current != version:
            raise self._conflict(path)
        self.write(path, data)
        import hashlib

        return hashlib.sha256(data).hexdigest()

    def _conflict(self, path: str) -> CommitConflictError:
        msg = f"{self._where(path)} changed since it was read: another writer committed first; nothing was written"
        return CommitConflictError(msg)

    def sync(self, path: str = "") -> None:
        """Return once what is written at ``path`` would survive a crash or a power loss.

        ``path`` is an object, or a prefix for everything under it (``""``: the whole store). On a local disk
        the files and the directories naming them are flushed to the device (``deltacells.storage._durable``
        says what each platform guarantees); on object stores a write that returned is durable already, and
        nothing is done.
        """
        if not self.is_local:
            return
        root = self.local_path("")
        full = self.local_path(path)
        if root is not None and full is not None:
            fsync_tree(full, root)

    # ------------------------------------------------------------------------------------- local disk

    @property
    def is_local(self) -> bool:
        """Whether the objects are files on a local disk (see :meth:`local_path`)."""
        return False

    def local_path(self, path: str) -> str | None:
        """The filesystem path of ``path`` for fast local access (memory mapping), or None if not local."""
        return None

    def open_file(self, path: str, size: int | None = None) -> StoreFile:
        """A read-only, seekable file over object ``path`` whose reads are ranged reads of this store.

        Parameters
        ----------
        path
            The object.
        size
            Its size in bytes, when known (e.g. from the manifest); otherwise asked of :meth:`size`.
        """
        return StoreFile(self, path, size)

    # ------------------------------------------------------------------------- helpers for subclasses

    def _where(self, path: str) -> str:
        """``path`` with the store's URL in front, as error messages name it."""
        return f"{self.url.rstrip('/')}/{path}" if path else self.url

    def _missing(self, path: str) -> MissingObjectError:
        """The error to raise for the missing object ``path``."""
        msg = f"{self._where(path)} is missing"
        return MissingObjectError(msg)
