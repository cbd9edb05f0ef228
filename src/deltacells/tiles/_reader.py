"""Reading tiles: fetched, checked against the manifest and decoded once, however many threads ask."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from typing import TYPE_CHECKING

import numpy as np

from deltacells._threads import default_threads, shared_pool
from deltacells.errors import MissingObjectError, OutOfRangeError
from deltacells.format import decode_checked_tile, first_problem_raises, missing_tile, tile_path
from deltacells.tiles._cache import TileCache

if TYPE_CHECKING:
    from deltacells.codec import DecodedTile
    from deltacells.format import Manifest
    from deltacells.storage import BaseStore

__all__ = ["DEFAULT_TILE_CACHE_BYTES", "TileReader"]

#: Default bound on the decoded tiles a dataset keeps in memory.
DEFAULT_TILE_CACHE_BYTES = 256 * 2**20


class TileReader:
    """The tiles of one dataset, decoded on demand and kept in a byte-bounded cache.

    Safe to use from many threads at once: a tile that several threads want while it is being decoded is
    decoded once, and the others wait for it. Decoded tiles are shared read-only (their arrays cannot be
    written). In a forked child (a data-loader worker) the locks and the in-flight table start afresh, so
    nothing held by a parent thread at the fork can block the child.

    Parameters
    ----------
    store
        The dataset's store.
    manifest
        Its manifest (tile sizes, cells and nonzeros are checked against it).
    cache_bytes
        Bound on the memory of the cached tiles (0 disables the cache).
    threads
        Threads decoding the chunks of one tile, or tiles at once in :meth:`iter_tiles`; ``None``: the
        usable CPUs.
    """

    def __init__(
        self,
        store: BaseStore,
        manifest: Manifest,
        *,
        cache_bytes: int = DEFAULT_TILE_CACHE_BYTES,
        threads: int | None = None,
    ) -> None:
        self.store = store
        self.manifest = manifest
        self.threads = threads
        self.cache = TileCache(cache_bytes)
        self._fields = manifest.to_fields()
        self._decoded = 0
        self._reset_locks()

    def _reset_locks(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._in_flight: dict[int, Future[DecodedTile]] = {}

    def _guard(self) -> threading.Lock:
        if self._pid != os.getpid():  # a forked child: no lock or waiter of the parent's threads carries over
            self._reset_locks()
            self.cache.after_fork()
        return self._lock

    @property
    def tiles_decoded(self) -> int:
        """Tiles fetched and decoded so far (cache hits not counted)."""
        with self._guard():
            return self._decoded

    def get(self, tile: int, *, threads: int | None = None) -> DecodedTile:
        """Tile ``tile``, decoded (read-only arrays shared with the cache and other readers).

        Raises
        ------
        IndexError
            For a tile number out of range.
        MissingObjectError
            If the tile's object is not there.
        FormatError
            If its bytes break a rule of the format or disagree with the manifest.
        """
        if not 0 <= tile < self.manifest.n_tiles:
            msg = f"tile {tile} is out of range for {self.manifest.n_tiles} tiles"
            raise OutOfRangeError(msg)
        with self._guard():
            cached = self.cache.get(tile)
            if cached is not None:
                return cached
            waiting = self._in_flight.get(tile)
            if waiting is None:
                mine: Future[DecodedTile] = Future()
                self._in_flight[tile] = mine
        if waiting is not None:
            return waiting.result()
        try:
            decoded = self._fetch_and_decode(tile, threads=self.threads if threads is None else threads)
        except BaseException as exc:
            with self._guard():
                self._in_flight.pop(tile, None)
            mine.set_exception(exc)
            raise
        with self._guard():
            self._decoded += 1
            self.cache.put(tile, decoded)
            self._in_flight.pop(tile, None)
        mine.set_result(decoded)
        return decoded

    def iter_tiles(
        self, tiles: np.ndarray | list[int] | None = None, *, batch: int | None = None
    ) -> Iterator[tuple[int, DecodedTile]]:
        """Yield ``(index, tile)`` for ``tiles`` (default: all) in order, decoding a few at once in parallel.

        At most ``batch`` decoded tiles (default: twice the threads) are held beyond the cache at any time,
        so a loop over a whole dataset runs in flat memory.
        """
        order = np.arange(self.manifest.n_tiles) if tiles is None else np.asarray(tiles, dtype=np.int64)
        n_threads = self.n_threads
        batch = batch or self.batch_size
        if n_threads <= 1 or order.shape[0] <= 1:
            for t in order:
                yield int(t), self.get(int(t), threads=n_threads)
            return
        pool = shared_pool()
        for lo in range(0, order.shape[0], batch):
            ids = [int(t) for t in order[lo : lo + batch]]
            futures = [pool.submit(self.get, t, threads=1) for t in ids]
            try:
                for t, future in zip(ids, futures, strict=True):
                    yield t, future.result()
            finally:
                for future in futures:
                    future.cancel()

    @property
    def n_threads(self) -> int:
        """Threads used (``threads``, or the usable CPUs)."""
        return default_threads() if self.threads is None else self.threads

    @property
    def batch_size(self) -> int:
        """Tiles decoded at once by :meth:`iter_tiles`."""
        return max(2, 2 * self.n_threads)

    def _fetch_and_decode(self, tile: int, *, threads: int | None) -> DecodedTile:
        name = tile_path(tile)
        try:
            blob = self.store.read(name)
        except MissingObjectError as exc:
            raise missing_tile(tile, self._fields).to_exception(self.store.url) from exc
        checker = decode_checked_tile(blob, tile, self._fields, url=self.store.url, threads=threads)
        decoded = first_problem_raises(checker, self.store.url)
        assert decoded is not None
        return decoded.freeze()
