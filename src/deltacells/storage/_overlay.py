"""A store with a few objects held in memory in front of it: what a reader of an older version keeps of it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from typing import Any

from deltacells.storage._base import BaseStore, ByteRequest

__all__ = ["OverlayStore"]


class OverlayStore(BaseStore):
    """``store``, with the objects of ``objects`` read from memory instead (read-only: writes are refused).

    A reader that opened a dataset before an append rewrote its last tile keeps that tile, as its own
    version had it, in such an overlay (``deltacells.core._follow``), so that every read path (whole tiles,
    chunks, byte ranges, tile groups decoded together) finds the bytes its manifest names. An object of the
    overlay has no local path: readers of a local store read it through :meth:`read`.

    Parameters
    ----------
    store
        The store every other object is read from.
    objects
        Object path to its bytes.
    """

    def __init__(self, store: BaseStore, objects: Mapping[str, bytes]) -> None:
        self.store = store
        self.objects = dict(objects)
        self.url = store.url

    def __reduce__(self) -> tuple[type[OverlayStore], tuple[BaseStore, dict[str, bytes]]]:
        return (type(self), (self.store, self.objects))

    @property
    def io_concurrency(self) -> int:
        """The inner store's bound on requests in flight."""
        return self.store.io_concurrency

    def read(self, path: str, start: int | None = None, end: int | None = None) -> bytes:
        """The bytes ``[start, end)`` of ``path``: from memory for an object of the overlay, else the inner store's."""
        held = self.objects.get(path)
        if held is None:
            return self.store.read(path, start, end)
        return held[slice(start, end)]

    def read_many(self, requests: Iterable[ByteRequest], *, max_workers: int | None = None) -> list[bytes]:
        """Many objects or ranges at once, in request order; those not in memory through the inner store's."""
        requests = list(requests)
        inner = [(k, request) for k, request in enumerate(requests) if request[0] not in self.objects]
        got = self.store.read_many([request for _, request in inner], max_workers=max_workers)
        out: list[bytes] = [b""] * len(requests)
        for (k, _), data in zip(inner, got, strict=True):
            out[k] = data
        for k, (path, start, end) in enumerate(requests):
            if path in self.objects:
                out[k] = self.objects[path][slice(start, end)]
        return out

    def submit_read(self, path: str, start: int | None = None, end: int | None = None) -> Future[bytes]:
        """Start a read: done at once for an object of the overlay, else through the inner store."""
        held = self.objects.get(path)
        if held is None:
            return self.store.submit_read(path, start, end)
        done: Future[bytes] = Future()
        done.set_result(held[slice(start, end)])
        return done

    def size(self, path: str) -> int:
        """Size in bytes of ``path``."""
        held = self.objects.get(path)
        return self.store.size(path) if held is None else len(held)

    def exists(self, path: str) -> bool:
        """Whether ``path`` exists (in memory or in the inner store)."""
        return path in self.objects or self.store.exists(path)

    def list(self, prefix: str = "") -> list[str]:
        """The inner store's entries under ``prefix``."""
        return self.store.list(prefix)

    def write(self, path: str, data: bytes) -> None:
        """Refused: an overlay is a reader's view."""
        raise self._refused(path)

    def delete(self, path: str) -> None:
        """Refused: an overlay is a reader's view."""
        raise self._refused(path)

    def move(self, src: str, dst: str) -> None:
        """Refused: an overlay is a reader's view."""
        raise self._refused(src)

    def _refused(self, path: str) -> PermissionError:
        msg = f"{self._where(path)}: a reader's view of an older version is read-only"
        return PermissionError(msg)

    @property
    def is_local(self) -> bool:
        """Whether the inner store is on a local disk."""
        return self.store.is_local

    def local_path(self, path: str) -> str | None:
        """The inner store's filesystem path of ``path``; None for an object held in memory."""
        return None if path in self.objects else self.store.local_path(path)

    def fsspec_location(self, path: str) -> tuple[str, dict[str, Any]]:
        """The inner store's location of ``path``."""
        return self.store.fsspec_location(path)
