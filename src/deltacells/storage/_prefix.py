"""A view of the objects under one prefix of another store, as a store of its own."""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

from deltacells.storage._base import BaseStore, ByteRequest
from deltacells.storage._objects import StoredObject

__all__ = ["PrefixStore"]


class PrefixStore(BaseStore):
    """The objects under ``prefix`` in ``store``, with paths relative to that prefix.

    Every call goes to ``store`` with ``prefix/`` in front of the path (so concurrent reads keep
    the inner store's batching); error messages name ``f"{store.url}/{prefix}/{path}"``. The view
    pickles to the inner store and the prefix.

    Parameters
    ----------
    store
        The store holding the objects.
    prefix
        A ``/``-separated prefix inside ``store`` (``""``: the whole store).
    """

    def __init__(self, store: BaseStore, prefix: str) -> None:
        self.store = store
        self.prefix = prefix.strip("/")
        self.url = f"{store.url.rstrip('/')}/{self.prefix}" if self.prefix else store.url

    def __reduce__(self) -> tuple[type[PrefixStore], tuple[BaseStore, str]]:
        return (type(self), (self.store, self.prefix))

    def _inner(self, path: str) -> str:
        """``path`` as the inner store names it."""
        path = path.strip("/")
        if not self.prefix:
            return path
        return f"{self.prefix}/{path}" if path else self.prefix

    def read(self, path: str, start: int | None = None, end: int | None = None) -> bytes:
        """The bytes ``[start, end)`` of object ``path`` (see :meth:`~deltacells.storage.BaseStore.read`)."""
        return self.store.read(self._inner(path), start, end)

    def read_many(self, requests: Iterable[ByteRequest], *, max_workers: int | None = None) -> list[bytes]:
        """Many objects or ranges at once, in request order, through the inner store's ``read_many``."""
        inner = [(self._inner(path), start, end) for path, start, end in requests]
        return self.store.read_many(inner, max_workers=max_workers)

    def submit_read(self, path: str, start: int | None = None, end: int | None = None) -> Future[bytes]:
        """Start a read through the inner store (its requests in flight are shared)."""
        return self.store.submit_read(self._inner(path), start, end)

    def submit_write(self, path: str, data: bytes) -> Future[None]:
        """Start a write through the inner store."""
        return self.store.submit_write(self._inner(path), data)

    @property
    def io_concurrency(self) -> int:
        """The inner store's bound on requests in flight."""
        return self.store.io_concurrency

    def size(self, path: str) -> int:
        """Size in bytes of object ``path``."""
        return self.store.size(self._inner(path))

    def exists(self, path: str) -> bool:
        """Whether ``path`` is an object or a prefix with objects under it (``""``: the prefix itself)."""
        return self.store.exists(self._inner(path))

    def list(self, prefix: str = "") -> list[str]:
        """Sorted names of the entries directly under ``prefix``."""
        return self.store.list(self._inner(prefix))

    def objects_under(self, prefix: str = "") -> builtins.list[StoredObject]:
        """Every object at or under ``prefix`` (the inner store's listing), paths relative to this prefix."""
        cut = len(self.prefix) + 1 if self.prefix else 0
        return [replace(o, path=o.path[cut:]) for o in self.store.objects_under(self._inner(prefix))]

    def write(self, path: str, data: bytes) -> None:
        """Write object ``path`` whole, atomically."""
        self.store.write(self._inner(path), data)

    def write_many(self, objects: Mapping[str, bytes]) -> None:
        """Write every object of ``objects`` through the inner store's ``write_many``."""
        self.store.write_many({self._inner(path): data for path, data in objects.items()})

    def delete(self, path: str) -> None:
        """Remove object or prefix ``path``; nothing happens when absent."""
        self.store.delete(self._inner(path))

    def replace(self, src: str, dst: str) -> None:
        """Move object ``src`` to ``dst``, replacing it (the inner store's ``BaseStore.replace``)."""
        self.store.replace(self._inner(src), self._inner(dst))

    @property
    def atomic_conditional_writes(self) -> bool:
        """Whether the inner store's conditional writes are atomic."""
        return self.store.atomic_conditional_writes

    def read_versioned(self, path: str) -> tuple[bytes, str]:
        """Object ``path`` and its version tag (the inner store's)."""
        return self.store.read_versioned(self._inner(path))

    def version_tag(self, path: str) -> str | None:
        """The version tag of object ``path``, or None if absent (the inner store's)."""
        return self.store.version_tag(self._inner(path))

    def write_if(self, path: str, data: bytes, *, version: str | None) -> str:
        """Write ``path`` only if it is still at ``version`` (the inner store's ``BaseStore.write_if``)."""
        return self.store.write_if(self._inner(path), data, version=version)

    def move(self, src: str, dst: str) -> None:
        """Rename object or prefix ``src`` to ``dst``, both inside the prefix."""
        self.store.move(self._inner(src), self._inner(dst))

    @property
    def is_local(self) -> bool:
        """Whether the inner store is on a local disk."""
        return self.store.is_local

    def local_path(self, path: str) -> str | None:
        """The filesystem path of ``path`` when the inner store is local, else None."""
        return self.store.local_path(self._inner(path))

    def fsspec_location(self, path: str) -> tuple[str, dict[str, Any]]:
        """The inner store's location of ``path`` under the prefix."""
        return self.store.fsspec_location(self._inner(path))
