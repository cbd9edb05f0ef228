"""Reading tiles: fetched, checked against the manifest and decoded once, however many threads ask.

Whole tiles go through :class:`TileReader`: :meth:`~TileReader.get` one at a time, :meth:`~TileReader.iter_tiles`
as a pipeline (fetches ahead on the store's concurrency, decodes on the decoding threads). A tile on object
storage of which only a few cells are wanted may instead be read in ranges as a partial tile; that path, and
the rule choosing it, is in :mod:`deltacells.tiles._ranged`.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import numpy as np

from deltacells._threads import default_threads, shared_pool
from deltacells.errors import MissingObjectError, OutOfRangeError
from deltacells.format import decode_checked_tile, first_problem_raises, missing_tile, tile_path
from deltacells.tiles._cache import TileCache
from deltacells.tiles._ranged import RangedFetch, decode_ranged, ranged_read_pays, submit_ranged_fetch

if TYPE_CHECKING:
    from deltacells.codec import DecodedTile
    from deltacells.format import Manifest
    from deltacells.storage import BaseStore

__all__ = ["DEFAULT_PREFETCH_BYTES", "DEFAULT_TILE_CACHE_BYTES", "TileReader"]

#: Default bound on the decoded tiles a dataset keeps in memory.
DEFAULT_TILE_CACHE_BYTES = 256 * 2**20

#: Default bound on the compressed bytes fetched ahead of the decoders by :meth:`TileReader.iter_tiles`.
DEFAULT_PREFETCH_BYTES = 256 * 2**20


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
    prefetch_bytes
        Bound on the compressed tiles fetched ahead of the decoders in :meth:`iter_tiles` (at least as many
        tiles as decode at once are always fetched).
    """

    def __init__(
        self,
        store: BaseStore,
        manifest: Manifest,
        *,
        cache_bytes: int = DEFAULT_TILE_CACHE_BYTES,
        threads: int | None = None,
        prefetch_bytes: int = DEFAULT_PREFETCH_BYTES,
    ) -> None:
        self.store = store
        self.prefetch_bytes = prefetch_bytes
        self.manifest = manifest
        self.threads = threads
        self.cache = TileCache(cache_bytes)
        self._fields = manifest.to_fields()
        self._decoded = 0
        self._ranged = 0
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
    def tiles_read_ranged(self) -> int:
        """Tiles read in ranges (partially) so far."""
        with self._guard():
            return self._ranged

    @property
    def tiles_decoded(self) -> int:
        """Tiles fetched and decoded so far (cache hits not counted)."""
        with self._guard():
            return self._decoded

    def get(self, tile: int, *, threads: int | None = None, fetched: Future[bytes] | None = None) -> DecodedTile:
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
            decoded = self._fetch_and_decode(
                tile, threads=self.threads if threads is None else threads, fetched=fetched
            )
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
        self,
        tiles: np.ndarray | list[int] | None = None,
        *,
        batch: int | None = None,
        rows: Sequence[np.ndarray] | None = None,
    ) -> Iterator[tuple[int, DecodedTile]]:
        """Yield ``(index, tile)`` for ``tiles`` (default: all) in order, fetching ahead and decoding in parallel.

        A pipeline of two stages: fetches run on the store's own concurrency (up to
        ``store.io_concurrency`` requests, and ``prefetch_bytes`` of compressed tiles, ahead of the
        decoders), decodes on the decoding threads, at most ``batch`` tiles (default: twice the threads)
        beyond the one yielded. Network and decoding overlap, and memory stays bounded, so a loop over a
        whole dataset runs in flat memory.

        ``rows`` (the tile-local cells wanted, one array per tile of ``tiles``) lets a tile on remote
        storage be read in ranges when only a small part of it is needed (see ``reads_ranged``); such a
        tile is yielded *partial* (``tile.complete`` is false: the cells of the chunks not read are empty)
        and is not cached.
        """
        order = np.arange(self.manifest.n_tiles) if tiles is None else np.asarray(tiles, dtype=np.int64)
        n_threads = self.n_threads
        n = order.shape[0]
        if n == 0:
            return
        if rows is None:
            ranged = [False] * n
        else:
            ranged = [self.reads_ranged(int(t), len(r)) for t, r in zip(order, rows, strict=True)]
        if not any(ranged) and (n == 1 or (n_threads <= 1 and self.store.is_local)):
            for t in order:
                yield int(t), self.get(int(t), threads=n_threads)
            return
        local = self.store.is_local
        decode_ahead = max(1, batch or self.batch_size)
        fetch_ahead = max(decode_ahead + 1, 1 if local else self.store.io_concurrency)
        sizes = self.manifest.tile_bytes
        pool = shared_pool()
        fetches: dict[int, Future[Any]] = {}  # a whole tile's bytes, or a RangedFetch
        decodes: deque[tuple[int, Future[DecodedTile]]] = deque()
        next_fetch = next_decode = 0
        ahead_bytes = 0  # compressed bytes fetched (or being fetched) and not yet decoded
        try:
            for i in range(n):
                while next_fetch < n and next_fetch < i + fetch_ahead:
                    size = int(sizes[order[next_fetch]])
                    if next_fetch > i + decode_ahead and ahead_bytes + size > self.prefetch_bytes:
                        break
                    t = int(order[next_fetch])
                    with self._guard():
                        cached = self.cache.get(t) is not None
                    if ranged[next_fetch] and not cached:
                        assert rows is not None
                        fetches[next_fetch] = submit_ranged_fetch(self.store, self.manifest, t, rows[next_fetch])
                    elif not cached and not local:  # a local tile is read by its decoding task (the fast path)
                        fetches[next_fetch] = self._submit_fetch(t)
                        ahead_bytes += size
                    else:
                        ranged[next_fetch] = False
                    next_fetch += 1
                while next_decode < n and next_decode <= i + decode_ahead:
                    t = int(order[next_decode])
                    fetched = fetches.pop(next_decode, None)
                    if ranged[next_decode]:
                        decodes.append((t, pool.submit(self._decode_ranged, t, fetched)))
                    else:
                        if fetched is not None:
                            ahead_bytes -= int(sizes[t])
                        decodes.append((t, pool.submit(self.get, t, threads=1, fetched=fetched)))
                    next_decode += 1
                t, decoding = decodes.popleft()
                yield t, decoding.result()
        finally:
            for _, decoding in decodes:
                decoding.cancel()
            for fetched in fetches.values():
                fetched.cancel()

    @property
    def n_threads(self) -> int:
        """Threads used (``threads``, or the usable CPUs)."""
        return default_threads() if self.threads is None else self.threads

    @property
    def batch_size(self) -> int:
        """Tiles decoded at once by :meth:`iter_tiles`."""
        return max(2, 2 * self.n_threads)

    def reads_ranged(self, tile: int, n_rows: int) -> bool:
        """Whether ``iter_tiles`` reads ``n_rows`` cells of ``tile`` in ranges rather than whole.

        Only on remote storage, for a tile not in the cache, when the expected bytes (the prefix of header,
        chunk table and indptr, plus the chunks that ``n_rows`` cells spread at random would touch) are at
        most ``RANGED_MAX_SHARE`` of the tile (:func:`~deltacells.tiles._ranged.ranged_read_pays`). Ranged
        reads cost a second round trip (prefix, then frames) and cannot check the tile's CRC-32, which
        covers the whole object; every other rule is checked for what is read.
        """
        if not ranged_read_pays(self.store, self.manifest, tile, n_rows):
            return False
        with self._guard():
            return self.cache.get(tile) is None

    def _decode_ranged(self, tile: int, fetched: Future[RangedFetch]) -> DecodedTile:
        """Decode the chunks a ranged fetch brought (a partial tile, not cached), counting it."""
        decoded = decode_ranged(tile, fetched, store=self.store, fields=self._fields)
        with self._guard():
            self._ranged += 1
        return decoded

    def _submit_fetch(self, tile: int) -> Future[bytes]:
        """Start fetching tile ``tile`` whole: one request, its size taken from the manifest (no HEAD first).

        One byte more than the manifest's size is asked for, so that a longer object shows (as a size that
        disagrees with ``tile_bytes``) without a second request.
        """
        return self.store.submit_read(tile_path(tile), 0, int(self.manifest.tile_bytes[tile]) + 1)

    def _fetch_and_decode(self, tile: int, *, threads: int | None, fetched: Future[bytes] | None = None) -> DecodedTile:
        try:
            if fetched is None:
                blob = self.store.read(tile_path(tile), 0, int(self.manifest.tile_bytes[tile]) + 1)
            else:
                blob = fetched.result()
        except MissingObjectError as exc:
            raise missing_tile(tile, self._fields).to_exception(self.store.url) from exc
        checker = decode_checked_tile(blob, tile, self._fields, url=self.store.url, threads=threads)
        decoded = first_problem_raises(checker, self.store.url)
        assert decoded is not None
        return decoded.freeze()
