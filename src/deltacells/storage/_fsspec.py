"""A store over any fsspec filesystem: local paths, ``file://``, ``memory://``, ``s3://``, ``gs://``..."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from deltacells.errors import MissingObjectError, OutputExistsError
from deltacells.storage._base import BaseStore, ByteRequest

__all__ = ["FsspecStore"]


def _plain(start: int | None, end: int | None) -> bool:
    """Whether fsspec reads ``[start:end]`` with slice semantics without knowing the size first."""
    if end is None:
        return True  # the whole object, from an offset, or a suffix
    if end < 0:
        return False
    return start is None or 0 <= start < end


class FsspecStore(BaseStore):
    """The objects of one dataset root, read and written through fsspec.

    The filesystem is created on first use in each process; the store pickles to its URL
    and storage options only.

    Parameters
    ----------
    url
        A local path or any fsspec URL (``s3://bucket/prefix``, ``memory://x``, ``file:///data``...).
    storage_options
        Passed to the fsspec filesystem (credentials, endpoint...).
    """

    def __init__(self, url: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None) -> None:
        url = os.fspath(url)
        # A local path is made absolute now: the store must name the same place after a pickle to a process
        # in another working directory, and in what is recorded of it (uns, exported h5ad files).
        self.url = url if "://" in url or "::" in url else os.path.abspath(os.path.expanduser(url))
        self.storage_options = dict(storage_options or {})
        self._fs: fsspec.AbstractFileSystem | None = None
        self._root: str | None = None
        self._pid: int | None = None

    def __reduce__(self) -> tuple[type[FsspecStore], tuple[str, dict[str, Any]]]:
        return (type(self), (self.url, self.storage_options))

    # --------------------------------------------------------------------------------- filesystem

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        """The fsspec filesystem, created on first use in each process."""
        if self._fs is None or self._pid != os.getpid():
            self._fs, self._root = fsspec.core.url_to_fs(self.url, **self.storage_options)
            self._pid = os.getpid()
        return self._fs

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
        """The bytes ``[start, end)`` of object ``path`` (see :meth:`~deltacells.storage.BaseStore.read`)."""
        full = self._full(path)
        try:
            if _plain(start, end):
                return self.fs.cat_file(full, start=start, end=end)
            first, stop, _ = slice(start, end).indices(int(self.fs.size(full)))
            return self.fs.cat_file(full, start=first, end=stop) if stop > first else b""
        except FileNotFoundError as exc:
            raise self._missing(path) from exc

    def read_many(self, requests: Sequence[ByteRequest], *, max_workers: int | None = None) -> list[bytes]:
        """Many objects or ranges at once, in request order (see :meth:`BaseStore.read_many`).

        On an asynchronous filesystem (s3, gcs, http...) the requests go out together through
        fsspec's ``cat_ranges``, at most ``max_workers`` at a time (fsspec's batch size by
        default); on others, through a thread pool.
        """
        requests = list(requests)
        fs = self.fs
        if len(requests) <= 1 or not getattr(fs, "async_impl", False):
            return super().read_many(requests, max_workers=max_workers)
        plain = [i for i, (_, start, end) in enumerate(requests) if _plain(start, end)]
        results: list[Any] = [None] * len(requests)
        if plain:
            fetched = fs.cat_ranges(
                [self._full(requests[i][0]) for i in plain],
                [requests[i][1] for i in plain],
                [requests[i][2] for i in plain],
                batch_size=max_workers,
                on_error="return",
            )
            for i, value in zip(plain, fetched, strict=True):
                results[i] = value
        for i, (path, start, end) in enumerate(requests):
            if results[i] is None:  # ranges that need the size first (rare): one by one
                try:
                    results[i] = self.read(path, start, end)
                except Exception as exc:
                    results[i] = exc
        for (path, _, _), value in zip(requests, results, strict=True):
            if isinstance(value, FileNotFoundError) and not isinstance(value, MissingObjectError):
                raise self._missing(path) from value
            if isinstance(value, BaseException):
                raise value
        return results

    def size(self, path: str) -> int:
        """Size in bytes of object ``path``.

        Raises
        ------
        MissingObjectError
            If the object does not exist.
        """
        try:
            return int(self.fs.size(self._full(path)))
        except FileNotFoundError as exc:
            raise self._missing(path) from exc

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

    # ------------------------------------------------------------------------------------- writes

    def write(self, path: str, data: bytes) -> None:
        """Write object ``path`` whole; on a local disk through a temporary file and a rename."""
        full = self._full(path)
        if not self.is_local:
            self.fs.pipe_file(full, data)
            return
        os.makedirs(os.path.dirname(full), exist_ok=True)
        tmp = f"{full}.{uuid.uuid4().hex}.tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, full)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.remove(tmp)

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

    def path(self, name: str) -> str:
        """Full path of ``name`` inside :attr:`fs` (what fsspec calls it)."""
        return self._full(name)
