"""Reading tiles: fetched, checked against the manifest and decoded once, however many threads ask.

Tiles go through :class:`TileReader`: :meth:`~TileReader.get` one at a time, :meth:`~TileReader.iter_tiles`
as a pipeline (fetches ahead on the store's concurrency, decodes on the decoding threads).

Both take the cells wanted of a tile (``cells=`` / ``rows=``). A tile wanted whole is decoded whole
(:func:`~deltacells.decode_tile`, its chunks in parallel). A tile wanted for some cells only is read whole
all the same (one read) and checked as a whole tile is (size, header, CRC-32, chunk table, indptr), but
only the chunks holding those cells are decoded: the result is a *partial* tile (``complete`` false, the
cells of the other chunks empty rows; :func:`~deltacells.codec.decode_chunks`). Partial tiles are cached
like whole ones: a later request for cells of chunks already decoded is a hit, and one needing more
chunks decodes only the missing ones and caches the union (:func:`~deltacells.codec._partial.merge_partial`).

A tile on object storage of which only a few cells are wanted may instead be read in ranges (only the
frames of the chunks wanted, and not those already cached); that path, and the rule choosing it, is in
:mod:`deltacells.tiles._ranged`.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections import OrderedDict, deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import numpy as np

from deltacells._threads import default_threads, shared_pool
from deltacells.codec import CELL_HI, CELL_LO, TileHeader, decode_chunks, merge_partial, parse_tile, read_chunk_table
from deltacells.errors import FormatError, MissingObjectError, OutOfRangeError
from deltacells.format import (
    check_tile,
    check_tile_size,
    decode_checked_tile,
    first_problem_raises,
    missing_tile,
    problem_from_error,
    tile_path,
)
from deltacells.storage import OverlayStore
from deltacells.tiles._cache import TileCache
from deltacells.tiles._into import read_tiles_into
from deltacells.tiles._ranged import (
    HeaderCounts,
    RangedFetch,
    chunks_to_decode,
    decode_ranged,
    ranged_read_pays,
    submit_ranged_fetch,
)

if TYPE_CHECKING:
    from deltacells.codec import DecodedTile, TilePrefix
    from deltacells.format import Checker, Manifest, ManifestFields
    from deltacells.storage import BaseStore, ReadBuffer

__all__ = ["DEFAULT_PREFETCH_BYTES", "DEFAULT_TILE_CACHE_BYTES", "TileReader"]

#: Default bound on the decoded tiles a dataset keeps in memory.
DEFAULT_TILE_CACHE_BYTES = 256 * 2**20

#: Bound on the tile prefixes (header, chunk table, indptr) a reader keeps for reads past the cache: about
#: 17 KiB a tile of 2,048 cells, so 64 MiB keep those of about 3,800 tiles (7.8 million cells).
PREFIX_CACHE_BYTES = 64 * 2**20

#: Default bound on the compressed bytes fetched ahead of the decoders by :meth:`TileReader.iter_tiles`.
DEFAULT_PREFETCH_BYTES = 256 * 2**20


class TileReader:
    """The tiles of one dataset, decoded on demand (whole, or only the chunks wanted) and kept in a cache.

    Safe to use from many threads at once: a tile that several threads want while it is being decoded is
    decoded once, and the others wait for it (and use it, or decode what it lacks for them). Decoded tiles
    are shared read-only (their arrays cannot be written). In a forked child (a data-loader worker) the
    locks and the in-flight table start afresh, so nothing held by a parent thread at the fork can block
    the child.

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
    cache_policy
        The cache's policy: ``"slru"`` (scan-resistant, the default) or ``"lru"`` (see :class:`TileCache`).
    """

    #: Whether a tile wanted for some of its cells decodes only the chunks holding them (False: whole tiles,
    #: as before chunk-level decoding; kept for ``benchmarks/bench_tile_cache.py``). Ranged reads of
    #: remote tiles do not depend on it.
    _partial_decode = True

    def __init__(
        self,
        store: BaseStore,
        manifest: Manifest,
        *,
        cache_bytes: int = DEFAULT_TILE_CACHE_BYTES,
        threads: int | None = None,
        prefetch_bytes: int = DEFAULT_PREFETCH_BYTES,
        cache_policy: str = "slru",
    ) -> None:
        self.store = store
        self.prefetch_bytes = prefetch_bytes
        self.manifest = manifest
        self.threads = threads
        self.cache = TileCache(cache_bytes, policy=cache_policy)
        self._fields = manifest.to_fields()
        self._decoded = 0
        self._chunks = 0
        self._ranged = 0
        self._prefixes: OrderedDict[int, TilePrefix] = OrderedDict()
        self._prefix_bytes = 0
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
        """Tiles read in ranges (partially) and decoded so far."""
        with self._guard():
            return self._ranged

    @property
    def tiles_decoded(self) -> int:
        """Tiles read whole and decoded so far, every chunk or only some (cache hits not counted).

        A tile read twice for different chunks (a partial tile in the cache, extended) counts twice;
        tiles read in ranges are counted by :attr:`tiles_read_ranged`.
        """
        with self._guard():
            return self._decoded

    @property
    def chunks_decoded(self) -> int:
        """Chunks decompressed so far, by whole-tile, partial and ranged decodes (cache hits not counted)."""
        with self._guard():
            return self._chunks

    def get(
        self,
        tile: int,
        *,
        threads: int | None = None,
        fetched: Future[ReadBuffer] | None = None,
        cells: np.ndarray | None = None,
    ) -> DecodedTile:
        """Tile ``tile``, decoded (read-only arrays shared with the cache and other readers).

        Parameters
        ----------
        tile
            The tile number.
        threads
            Threads decoding its chunks (default: the reader's).
        fetched
            The tile's bytes, being fetched whole (:meth:`iter_tiles` fetches ahead).
        cells
            Tile-local cells wanted; ``None`` (the default): the whole tile. With cells, the tile may be
            *partial* (``complete`` false): only the chunks holding them (and any the cache held) are
            decoded, the cells of the others are empty rows.

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
        if not self._partial_decode:
            cells = None
        looked_up = False
        while True:
            with self._guard():
                # One lookup counts a hit or a miss; after waiting for another thread, look again uncounted.
                found = self._held(tile, cells) if looked_up else self.cache.get(tile, cells)
                looked_up = True
                if found is not None:
                    return found
                waiting = self._in_flight.get(tile)
                if waiting is None:
                    mine: Future[DecodedTile] = Future()
                    self._in_flight[tile] = mine
                    base = self.cache.peek(tile)  # a partial tile: only the chunks it lacks are decoded
                    break
            done = waiting.result()  # another thread's decode of this tile (its error, if it fails)
            if done.holds(cells):
                return done
        try:
            decoded, n_chunks = self._fetch_and_decode(
                tile, threads=self.threads if threads is None else threads, fetched=fetched, cells=cells, base=base
            )
        except BaseException as exc:
            with self._guard():
                self._in_flight.pop(tile, None)
            mine.set_exception(exc)
            raise
        with self._guard():
            self._decoded += 1
            self._chunks += n_chunks
            decoded = self._store(tile, decoded, base)
            self._in_flight.pop(tile, None)
        mine.set_result(decoded)
        return decoded

    def iter_tiles(
        self,
        tiles: np.ndarray | list[int] | None = None,
        *,
        decode_ahead: int | None = None,
        rows: Sequence[np.ndarray | None] | None = None,
    ) -> Iterator[tuple[int, DecodedTile]]:
        """Yield ``(index, tile)`` for ``tiles`` (default: all) in order, fetching ahead and decoding in parallel.

        A pipeline of two stages: fetches run on the store's own concurrency (up to
        ``store.io_concurrency`` requests, and ``prefetch_bytes`` of compressed tiles, ahead of the
        decoders), decodes on the decoding threads, at most ``decode_ahead`` tiles (default:
        :attr:`decode_ahead`) beyond the one yielded. Network and decoding
        overlap, and memory stays bounded, so a loop over a whole dataset runs in flat memory.

        ``rows`` (the tile-local cells wanted, one array per tile of ``tiles``, ``None`` for a tile wanted
        whole) lets a tile be decoded only in the chunks holding them (see :meth:`get`), and a tile on
        remote storage be read in ranges when only a small part of it is needed (see
        :meth:`reads_ranged`). Such a tile is yielded *partial* (``tile.complete`` is false: the cells of
        the chunks not decoded are empty) and cached as such.
        """
        order = np.arange(self.manifest.n_tiles) if tiles is None else np.asarray(tiles, dtype=np.int64)
        n_threads = self.n_threads
        n = order.shape[0]
        if n == 0:
            return
        wanted: list[np.ndarray | None] = [None] * n if rows is None else list(rows)
        ranged = [
            r is not None and self.reads_ranged(int(t), len(r), cells=r) for t, r in zip(order, wanted, strict=True)
        ]
        if not any(ranged) and (n == 1 or (n_threads <= 1 and self.store.is_local)):
            for t, cells in zip(order, wanted, strict=True):
                yield int(t), self.get(int(t), threads=n_threads, cells=cells)
            return
        local = self.store.is_local
        decode_ahead = max(1, decode_ahead or self.decode_ahead)
        fetch_ahead = max(decode_ahead + 1, 1 if local else self.store.io_concurrency)
        sizes = self.manifest.tile_bytes
        pool = shared_pool()
        fetches: dict[int, Future[Any] | _Held] = {}  # a whole tile's bytes, a RangedFetch, or a tile the cache held
        decodes: deque[tuple[int, Future[DecodedTile]]] = deque()
        next_fetch = next_decode = 0
        ahead_bytes = 0  # compressed bytes fetched (or being fetched) and not yet decoded
        try:
            for i in range(n):
                while next_fetch < n and next_fetch < i + fetch_ahead:
                    size = int(sizes[order[next_fetch]])
                    if next_fetch > i + decode_ahead and ahead_bytes + size > self.prefetch_bytes:
                        break
                    t, cells = int(order[next_fetch]), wanted[next_fetch]
                    if ranged[next_fetch]:
                        with self._guard():  # counted here: a tile read in ranges does not go through get()
                            found = self.cache.get(t, cells)
                            base = None if found is not None else self.cache.peek(t)
                        if found is None:
                            assert cells is not None
                            fetches[next_fetch] = submit_ranged_fetch(self.store, self.manifest, t, cells, held=base)
                        else:
                            ranged[next_fetch] = False
                            fetches[next_fetch] = _Held(found)
                    elif not local:  # a local tile is read by its decoding task (the fast path)
                        with self._guard():
                            held = self._held(t, cells if self._partial_decode else None) is not None
                        if not held:
                            fetches[next_fetch] = self._submit_fetch(t)
                            ahead_bytes += size
                    next_fetch += 1
                while next_decode < n and next_decode <= i + decode_ahead:
                    t, cells = int(order[next_decode]), wanted[next_decode]
                    fetched = fetches.pop(next_decode, None)
                    if ranged[next_decode]:
                        assert isinstance(fetched, Future)  # every tile to decode by now was fetched
                        decodes.append((t, pool.submit(self._decode_ranged, t, fetched)))
                    elif isinstance(fetched, _Held):
                        decodes.append((t, fetched.future))
                    else:
                        if fetched is not None:
                            ahead_bytes -= int(sizes[t])
                        decodes.append((t, pool.submit(self.get, t, threads=1, fetched=fetched, cells=cells)))
                    next_decode += 1
                t, decoding = decodes.popleft()
                yield t, decoding.result()
        finally:
            for _, decoding in decodes:
                decoding.cancel()
            for fetched in fetches.values():
                if not isinstance(fetched, _Held):
                    fetched.cancel()

    def read_into(
        self,
        tiles: np.ndarray,
        row_starts: np.ndarray,
        nnz_starts: np.ndarray,
        out_indptr: np.ndarray,
        out_indices: np.ndarray,
        out_data: np.ndarray,
        *,
        columns: np.ndarray | None = None,
    ) -> bool:
        """Decode whole ``tiles`` straight into slices of one output CSR; return whether a count exceeds 2^24.

        Tile ``k`` fills rows from ``row_starts[k]`` and nonzeros from ``nnz_starts[k]`` (its manifest's
        ``tile_nnz``); the tiles are checked as :meth:`get` checks them and counted as decoded, but not
        cached; ``columns`` maps stored genes to output columns. See
        ``deltacells.tiles._into.read_tiles_into``.
        """
        args = (row_starts, nnz_starts, out_indptr, out_indices, out_data)
        tiles = np.asarray(tiles, dtype=np.int64)
        return read_tiles_into(self, tiles, *args, counted=self._count_whole, columns=columns)

    def holds_whole(self, tile: int) -> bool:
        """Whether the cache holds tile ``tile`` whole (not counted as a hit or a miss)."""
        with self._guard():
            return self._held(tile, None) is not None

    @property
    def fields(self) -> ManifestFields:
        """The manifest's sizes, cells, nonzeros and genes, which every tile is checked against."""
        return self._fields

    def prefix_of(self, tile: int) -> TilePrefix | None:
        """The prefix (header, chunk table, indptr) of ``tile`` kept by :meth:`keep_prefix`, if it still is.

        A local tile's prefix is kept only once the whole tile was read and its CRC-32 checked, so a
        reader holding it may read the tile's frames alone (``tiles._chunk_rows``).
        """
        with self._guard():
            prefix = self._prefixes.get(tile)
            if prefix is not None:
                self._prefixes.move_to_end(tile)
            return prefix

    def keep_prefix(self, tile: int, prefix: TilePrefix) -> None:
        """Keep ``tile``'s checked prefix (the least recently used go past ``PREFIX_CACHE_BYTES``)."""
        size = prefix.indptr.nbytes + prefix.table.nbytes
        with self._guard():
            old = self._prefixes.pop(tile, None)
            if old is not None:
                self._prefix_bytes -= old.indptr.nbytes + old.table.nbytes
            self._prefixes[tile] = prefix
            self._prefix_bytes += size
            while self._prefix_bytes > PREFIX_CACHE_BYTES and len(self._prefixes) > 1:
                _, gone = self._prefixes.popitem(last=False)
                self._prefix_bytes -= gone.indptr.nbytes + gone.table.nbytes

    def hold_in_memory(self, tile: int, blob: bytes) -> None:
        """Read ``tile`` from ``blob`` from now on, on every read path (an ``OverlayStore``).

        For a reader whose dataset was appended to since it opened it: the append rewrote the last tile with
        the new cells after the old ones, so the reader keeps its own version of that tile in memory
        (``deltacells.core._follow``), with the same cells and nonzeros as its manifest says; only the tile's
        size in bytes changes, to ``len(blob)``. What the cache holds of the tile stays (the same cells).
        """
        name = tile_path(tile)
        with self._guard():
            store = self.store
            held = dict(store.objects) if isinstance(store, OverlayStore) else {}
            held[name] = bytes(blob)
            sizes = np.array(self.manifest.tile_bytes, dtype=np.int64)
            sizes[tile] = len(blob)
            self.manifest = dataclasses.replace(self.manifest, tile_bytes=sizes)
            self._fields = self.manifest.to_fields()
            self.store = OverlayStore(store.store if isinstance(store, OverlayStore) else store, held)
            gone = self._prefixes.pop(tile, None)  # the frames' places were those of the other object
            if gone is not None:
                self._prefix_bytes -= gone.indptr.nbytes + gone.table.nbytes

    def holds_in_memory(self, tile: int) -> bool:
        """Whether ``tile`` is read from memory (:meth:`hold_in_memory`)."""
        store = self.store
        return isinstance(store, OverlayStore) and tile_path(tile) in store.objects

    def _count_whole(self, n_chunks: int) -> None:
        self.count_reads(whole=1, chunks=n_chunks)

    def count_reads(self, *, whole: int = 0, ranged: int = 0, chunks: int = 0) -> None:
        """Add reads done past ``get()`` to the counters: tiles read whole, in ranges, and chunks decoded."""
        with self._guard():
            self._decoded += whole
            self._ranged += ranged
            self._chunks += chunks

    @property
    def n_threads(self) -> int:
        """Threads used (``threads``, or the usable CPUs)."""
        return default_threads() if self.threads is None else self.threads

    @property
    def decode_ahead(self) -> int:
        """Tiles :meth:`iter_tiles` decodes ahead of the one it yields, by default: twice the threads (at least 2)."""
        return max(2, 2 * self.n_threads)

    def reads_ranged(self, tile: int, n_rows: int, *, cells: np.ndarray | None = None) -> bool:
        """Whether ``iter_tiles`` reads ``n_rows`` cells of ``tile`` in ranges rather than whole.

        Only on remote storage, when the cache does not hold those ``cells`` (without them: when it does
        not hold the whole tile), and when the expected bytes (the prefix of header, chunk table and
        indptr, plus the chunks that the cells would touch: spread at random, or in runs) are at most
        ``RANGED_MAX_SHARE`` of the tile (``deltacells.tiles._ranged.ranged_read_pays``). Ranged
        reads cost a second round trip (prefix, then frames) and cannot check the tile's CRC-32, which
        covers the whole object; every other rule is checked for what is read.
        """
        if not ranged_read_pays(self.store, self.manifest, tile, n_rows, cells=cells):
            return False
        with self._guard():
            return self._held(tile, cells) is None

    def _held(self, tile: int, cells: np.ndarray | None) -> DecodedTile | None:
        """The cached tile if it holds ``cells`` (None: every cell); not counted, not marked used (lock held)."""
        cached = self.cache.peek(tile)
        return cached if cached is not None and cached.holds(cells) else None

    def _store(self, tile: int, decoded: DecodedTile, base: DecodedTile | None) -> DecodedTile:
        """Cache ``decoded`` and return it, merged with what another thread cached meanwhile (lock held).

        ``base`` is the cached tile ``decoded`` was built on (its chunks are in ``decoded``); a different
        entry cached since (a ranged read of other chunks) is merged in rather than dropped.
        """
        current = self.cache.peek(tile)
        if current is not None and current is not base and not decoded.complete:
            decoded = _union(current, decoded)
        if decoded is not current:
            self.cache.put(tile, decoded)
        return decoded

    def _decode_ranged(self, tile: int, fetched: Future[RangedFetch]) -> DecodedTile:
        """Decode the chunks a ranged fetch brought (with the cached tile it skipped), count and cache it."""
        decoded = decode_ranged(tile, fetched, store=self.store, fields=self._fields)
        got = fetched.result()
        with self._guard():
            self._ranged += 1
            self._chunks += int(got.chunks.shape[0])
            return self._store(tile, decoded, got.held)

    def _submit_fetch(self, tile: int) -> Future[ReadBuffer]:
        """Start fetching tile ``tile`` whole: one request, its size taken from the manifest (no HEAD first).

        One byte more than the manifest's size is asked for, so that a longer object shows (as a size that
        disagrees with ``tile_bytes``) without a second request.
        """
        return self.store.submit_read_buffer(tile_path(tile), 0, int(self.manifest.tile_bytes[tile]) + 1)

    def _fetch_and_decode(
        self,
        tile: int,
        *,
        threads: int | None,
        fetched: Future[ReadBuffer] | None = None,
        cells: np.ndarray | None = None,
        base: DecodedTile | None = None,
    ) -> tuple[DecodedTile, int]:
        """Read tile ``tile`` whole, check it, decode the chunks wanted; return it (frozen) and the chunks decoded.

        The whole tile (``cells`` None, nothing cached) is decoded by :func:`~deltacells.decode_tile`;
        otherwise only the chunks holding ``cells`` (every chunk when None) that ``base`` lacks are, and
        ``base``'s are merged in.
        """
        blob: ReadBuffer
        try:
            if fetched is None:
                blob = self.store.read(tile_path(tile), 0, int(self.manifest.tile_bytes[tile]) + 1)
            else:
                blob = fetched.result()
        except MissingObjectError as exc:
            raise missing_tile(tile, self._fields).to_exception(self.store.url) from exc
        if cells is not None and base is None and _wants_every_chunk(blob, cells):
            cells = None  # every chunk: the whole-tile decoder (one CRC-32, chunks in parallel when large)
        if cells is None and base is None:
            checker = decode_checked_tile(blob, tile, self._fields, url=self.store.url, threads=threads)
            decoded = first_problem_raises(checker, self.store.url)
            assert decoded is not None
            return decoded.freeze(), decoded.n_chunks_decoded
        partial = _decode_checked_chunks(
            blob, tile, self._fields, cells=cells, base=base, url=self.store.url, threads=threads
        )
        result = first_problem_raises(partial, self.store.url)
        assert result is not None
        decoded, n_chunks = result
        return decoded.freeze(), n_chunks


class _Held:
    """A tile the cache held when :meth:`TileReader.iter_tiles` looked (yielded as it is)."""

    __slots__ = ("future",)

    def __init__(self, tile: DecodedTile) -> None:
        self.future: Future[DecodedTile] = Future()
        self.future.set_result(tile)


def _wants_every_chunk(blob: bytes | memoryview, cells: np.ndarray) -> bool:
    """Whether ``cells`` are in every chunk (with cells) of the tile ``blob``, by its header and chunk table.

    Only chooses the decoder: nothing is checked here (a malformed tile answers False, and the checked
    decoding that follows reports it).
    """
    try:
        view = memoryview(blob).cast("B")
        table = read_chunk_table(view, TileHeader.unpack(view))
        cell_lo, cell_hi = table[:, CELL_LO].astype(np.int64), table[:, CELL_HI].astype(np.int64)
        touched = np.unique(np.searchsorted(cell_hi, cells, side="right"))
        return int(touched.shape[0]) >= int(np.count_nonzero(cell_hi > cell_lo))
    except (ValueError, TypeError, OverflowError):  # a FormatError (a ValueError) too
        return False


def _union(current: DecodedTile, decoded: DecodedTile) -> DecodedTile:
    """``decoded`` with the chunks of ``current`` merged in, when both are decodings of the same tile."""
    try:
        return merge_partial(decoded, current).freeze()
    except ValueError:  # not the same tile (the object changed): the newer decode wins
        return decoded


def _decode_checked_chunks(
    blob: bytes | memoryview,
    tile: int,
    fields: ManifestFields,
    *,
    cells: np.ndarray | None,
    base: DecodedTile | None,
    url: str = "",
    threads: int | None = 1,
) -> Checker[tuple[DecodedTile, int] | None]:
    """Check a whole tile's bytes as :func:`~deltacells.format.decode_checked_tile` does; decode some chunks.

    The size against the manifest, then the header, CRC-32, chunk table and indptr
    (:func:`~deltacells.codec._partial.parse_tile`), the header's cells, nonzeros and genes against the
    manifest, then the frames of the chunks decoded (:func:`~deltacells.codec.decode_chunks`): those holding
    ``cells`` (every chunk when None) that ``base`` (a partial decoding of the same tile) lacks. Returns the
    tile (merged with ``base``) and how many chunks were decoded.
    """
    name = tile_path(tile)
    where = f"{url.rstrip('/')}/{name}" if url else name
    yield from check_tile_size(len(blob), tile, fields)
    try:
        prefix = parse_tile(blob, name=where)
    except FormatError as exc:
        yield problem_from_error(name, exc, url=url or None)
        return None
    header = prefix.header
    problems = list(check_tile(HeaderCounts(header.n_cells, header.nnz, header.n_genes), tile, fields))
    yield from problems
    if problems:
        return None
    wanted = np.arange(prefix.n_chunks) if cells is None else prefix.chunks_for_cells(cells)
    needed, base = chunks_to_decode(prefix, wanted, base)
    try:
        decoded = decode_chunks(prefix, [(0, blob)], needed, name=where, threads=threads)
    except FormatError as exc:
        yield problem_from_error(name, exc, url=url or None)
        return None
    if base is not None:
        decoded = merge_partial(base, decoded)
    return decoded, int(needed.shape[0])
