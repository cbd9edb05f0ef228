"""Where a dataset's objects live: any fsspec URL, held as a URL and options only.

A :class:`Store` pickles to its URL and storage options (never an open handle or
cached data), so that dask workers and data-loader processes can each open their own.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from deltacells.errors import MissingObjectError

__all__ = ["Store"]


class Store:
    """Read and write the objects of one dataset root through fsspec.

    Parameters
    ----------
    url
        A local path or any fsspec URL (``s3://bucket/prefix``, ``memory://x``...).
    storage_options
        Passed to the fsspec filesystem (credentials, endpoint...).
    """

    def __init__(self, url: str | os.PathLike[str], storage_options: dict[str, Any] | None = None) -> None:
        self.url = os.fspath(url)
        self.storage_options = dict(storage_options or {})
        self._fs: fsspec.AbstractFileSystem | None = None
        self._root: str | None = None

    def __reduce__(self) -> tuple[type[Store], tuple[str, dict[str, Any]]]:
        return (type(self), (self.url, self.storage_options))

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        """The fsspec filesystem (created on first use in each process)."""
        if self._fs is None:
            self._fs, self._root = fsspec.core.url_to_fs(self.url, **self.storage_options)
        return self._fs

    @property
    def root(self) -> str:
        """The root path inside :attr:`fs` (no trailing slash)."""
        _ = self.fs
        assert self._root is not None
        return self._root.rstrip("/")

    @property
    def is_local(self) -> bool:
        """Whether the store is a local directory."""
        return isinstance(self.fs, LocalFileSystem)

    def path(self, name: str) -> str:
        """Full path of the object ``name`` (relative to the root)."""
        return f"{self.root}/{name}" if name else self.root

    def read(self, name: str) -> bytes:
        """Return the bytes of object ``name``.

        Raises
        ------
        MissingObjectError
            If the object does not exist.
        """
        try:
            return self.fs.cat_file(self.path(name))
        except FileNotFoundError as exc:
            msg = f"{self.url}: {name} is missing"
            raise MissingObjectError(msg) from exc

    def exists(self, name: str) -> bool:
        """Whether object ``name`` exists."""
        return self.fs.exists(self.path(name))

    def size(self, name: str) -> int:
        """Size in bytes of object ``name``."""
        return int(self.fs.size(self.path(name)))

    def listdir(self, name: str = "") -> set[str]:
        """Names (relative to ``name``) of the entries directly under ``name``; empty if absent."""
        try:
            entries = self.fs.ls(self.path(name), detail=False)
        except (FileNotFoundError, NotADirectoryError):
            return set()
        prefix = self.path(name).rstrip("/") + "/"
        return {
            e.rstrip("/")[len(prefix) :] if e.startswith(prefix) else e.rstrip("/").rsplit("/", 1)[-1] for e in entries
        }

    def write(self, name: str, data: bytes) -> None:
        """Write object ``name`` whole; on a local disk through a temporary file and a rename."""
        path = self.path(name)
        if self.is_local:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.{uuid.uuid4().hex}.tmp"
            try:
                with open(tmp, "wb") as f:
                    f.write(data)
                os.replace(tmp, path)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(tmp)
        else:
            self.fs.pipe_file(path, data)

    def remove(self, name: str) -> None:
        """Remove object or directory ``name`` if it exists."""
        path = self.path(name)
        if self.fs.exists(path):
            self.fs.rm(path, recursive=self.fs.isdir(path))

    def makedirs(self) -> None:
        """Create the root directory (a no-op on object stores)."""
        self.fs.makedirs(self.root, exist_ok=True)
