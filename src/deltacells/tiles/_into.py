"""Whole tiles decoded straight into one output CSR: the path of full reads and of ranges of cells.

A read that wants whole tiles has no use for the tiles themselves: each one would be decoded into arrays
of its own, then copied into the output and converted to the output's dtype. Here the output is allocated
first (its size is the manifest's ``tile_nnz``, which every tile's header is checked against before a byte
is written), and each tile's chunks are decoded into their slices of it, in the output's dtype: every
nonzero is written once. Nothing goes through the tile cache.

Every tile is read (or its bytes, fetched ahead on remote storage, taken) and checked whole (size, header,
CRC-32, chunk table, indptr, frame sizes, counts against the manifest) before its chunks decode, on the
shared pool, a bounded number of tasks ahead. A task holds about :data:`~deltacells.codec.WORK_UNIT_NNZ`
nonzeros, whatever the tiles: a large tile is read and checked by the calling thread and its chunks decode
in runs of that many nonzeros, so two threads stay busy even on a dataset of two tiles of unequal size,
however finely the tiles are chunked; small tiles (an atlas of sparse cells: thousands of tiles of a few
thousand nonzeros) go in groups of consecutive tiles of that many nonzeros, each task reading, checking and
decoding its own, so that their reads and checks are spread over the threads too and a task's cost is its
nonzeros', not the tiles'.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from deltacells._threads import shared_pool
from deltacells.codec import WORK_UNIT_NNZ, decode_tiles, work_units
from deltacells.errors import FormatError, MissingObjectError
from deltacells.format import (
    check_tile_bytes_against,
    first_problem_raises,
    missing_tile,
    problem_from_error,
    tile_path,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from deltacells.codec import CheckedTile
    from deltacells.storage import ReadBuffer
    from deltacells.tiles._reader import TileReader

__all__ = ["DIRECT_DTYPES", "read_tiles_into", "tile_groups"]

#: Value dtypes the decoder writes directly (numba compiles a kernel for each).
DIRECT_DTYPES = frozenset(np.dtype(t) for t in (np.int32, np.int64, np.float32, np.float64))

#: Units of work (runs of chunks, :func:`~deltacells.codec.work_units`) queued on the pool per decoding thread
#: (enough to keep them busy while the next tile is checked).
UNITS_AHEAD_PER_THREAD = 4

#: A read of at least this many tiles per decoding thread makes each tile a task of its own (read, checked and
#: decoded by one thread); fewer, and a large tile is read and checked by the calling thread and its chunks
#: shared among the threads. 100,000 resampled Visium cells (49 tiles of 24 chunks), 2 threads: 0.15 s shared,
#: 0.10 s a task a tile.
TILE_TASKS_PER_THREAD = 4


def read_tiles_into(
    reader: TileReader,
    tiles: np.ndarray,
    row_starts: np.ndarray,
    nnz_starts: np.ndarray,
    out_indptr: np.ndarray,
    out_indices: np.ndarray,
    out_data: np.ndarray,
    *,
    counted: Callable[[int], None],
    columns: np.ndarray | None = None,
) -> bool:
    """Decode whole tiles into slices of an output CSR; return whether a count exceeds 2^24.

    Parameters
    ----------
    reader
        The dataset's tile reader (its store, manifest, threads and prefetch bound).
    tiles
        The tiles, each wanted whole.
    row_starts, nnz_starts
        Where each tile's first row and first nonzero go in the output.
    out_indptr
        ``int64`` row pointers of the output: entries ``row_starts[k] + 1 .. row_starts[k] + n_cells``
        are written for tile ``k`` (entry ``row_starts[k]``, the end of what precedes it, is not).
    out_indices, out_data
        The output's ``int32`` indices and values (a dtype of :data:`DIRECT_DTYPES`); tile ``k`` fills
        ``[nnz_starts[k], nnz_starts[k] + tile_nnz[k])``.
    counted
        Called with the chunks of each tile decoded (the reader's counters).
    columns
        ``int32[n_genes]``: the output column of each stored gene (None: the stored ones); see
        :meth:`~deltacells.codec._decode.CheckedTile.decode_into`.

    Raises
    ------
    FormatError
        If a tile breaks a rule of the format or disagrees with the manifest (the first such tile, in order).
    MissingObjectError
        If a tile is not there.

    Notes
    -----
    Tiles of fewer than :data:`~deltacells.codec.WORK_UNIT_NNZ` nonzeros go in groups of consecutive tiles
    (:func:`tile_groups`), each a task of the pool that reads its tiles (local files; the bytes fetched
    ahead on remote storage), checks and decodes them, one after the other: an atlas of sparse cells has
    thousands of tiles of a few thousand nonzeros, whose reads and checks on the calling thread, and one task
    each, cost more than their decoding. Larger tiles are read and checked on the calling thread, and their
    chunks decode in runs of about ``WORK_UNIT_NNZ`` nonzeros (:func:`~deltacells.codec.work_units`).
    """
    n_threads = reader.n_threads
    pool = shared_pool() if n_threads > 1 else None
    fetches = _Fetches(reader, tiles)
    outputs = _Outputs(out_indptr, out_indices, out_data, columns)
    decodes: deque[Future[bool]] = deque()
    held: deque[tuple[bytearray, list[Future[bool]]]] = deque()  # a tile's buffer, until its chunks are done
    large = False
    # Tiles enough for every thread to have several: each large one is a task too (read, checked and decoded on
    # a decoding thread), so that reads and checks run beside the decoding rather than before it, on this thread.
    tile_tasks = pool is not None and tiles.shape[0] >= TILE_TASKS_PER_THREAD * n_threads
    try:
        for first, stop in tile_groups(reader.manifest.tile_nnz[tiles]):
            if tile_tasks or stop - first > 1 or int(reader.manifest.tile_nnz[tiles[first]]) < WORK_UNIT_NNZ:
                try:
                    blobs = None if fetches.local else [fetches.take(k)[1] for k in range(first, stop)]
                except MissingObjectError:
                    _raise_earlier(decodes)
                    raise
                group = (tiles[first:stop], row_starts[first:stop], nnz_starts[first:stop])
                if pool is None:
                    large |= _decode_group(reader, *group, blobs, outputs, counted)
                    continue
                decodes.append(pool.submit(_decode_group, reader, *group, blobs, outputs, counted))
            else:
                k, tile = first, int(tiles[first])
                try:
                    buffer, blob = fetches.take(k)
                    checked = _checked(reader, tile, blob)
                except (FormatError, MissingObjectError):
                    _raise_earlier(decodes)  # a tile before this one may be broken too: its error first
                    raise
                indices, data = outputs.write_indptr(checked, int(row_starts[k]), int(nnz_starts[k]))
                n_chunks = checked.header.n_chunks
                futures: list[Future[bool]] = []
                if pool is None:
                    large |= _decode_chunks(reader, tile, checked, range(n_chunks), indices, data, columns)
                else:
                    for unit in work_units(checked.table, np.arange(n_chunks)):
                        futures.append(pool.submit(_decode_chunks, reader, tile, checked, unit, indices, data, columns))
                        decodes.append(futures[-1])
                        while len(decodes) > UNITS_AHEAD_PER_THREAD * n_threads:  # a unit done for each one queued
                            large |= decodes.popleft().result()
                if buffer is not None:
                    held.append((buffer, futures))
                counted(n_chunks)
            while len(decodes) > UNITS_AHEAD_PER_THREAD * n_threads:
                large |= decodes.popleft().result()
            while held and all(future.done() for future in held[0][1]):
                fetches.give_back(held.popleft()[0])
        while decodes:
            large |= decodes.popleft().result()
    finally:
        for future in decodes:
            future.cancel()
        fetches.cancel()
    return large


def tile_groups(tile_nnz: np.ndarray, min_nnz: int | None = None) -> list[tuple[int, int]]:
    """The tasks of a read of whole tiles: ``(first, stop)`` runs of consecutive tiles (positions in ``tile_nnz``).

    Tiles of fewer than ``min_nnz`` (default :data:`~deltacells.codec.WORK_UNIT_NNZ`) nonzeros go together
    until their nonzeros reach it (the last group may hold fewer); a larger tile is a group of its own
    (its chunks are then cut in runs of their own).

    Examples
    --------
    >>> tile_groups(np.array([40, 40, 40, 150, 10, 10]), min_nnz=100)
    [(0, 3), (3, 4), (4, 6)]
    """
    if min_nnz is None:
        min_nnz = WORK_UNIT_NNZ
    nnz = np.asarray(tile_nnz, dtype=np.int64)
    groups: list[tuple[int, int]] = []
    first, total = 0, 0
    for k, count in enumerate(nnz.tolist()):  # per tile, never per cell
        if count >= min_nnz:
            if k > first:
                groups.append((first, k))
            groups.append((k, k + 1))
            first, total = k + 1, 0
            continue
        total += count
        if total >= min_nnz:
            groups.append((first, k + 1))
            first, total = k + 1, 0
    if first < nnz.shape[0]:
        groups.append((first, int(nnz.shape[0])))
    return groups


@dataclass(frozen=True)
class _Outputs:
    """The output CSR the tiles decode into, and the map of their genes."""

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    columns: np.ndarray | None

    def write_indptr(self, checked: CheckedTile, row_start: int, nnz_start: int) -> tuple[np.ndarray, np.ndarray]:
        """Write a checked tile's row pointers; return its slices of the indices and values."""
        # Entry row_start is the end of what precedes this tile (indptr[0] == 0 is checked).
        np.add(checked.indptr[1:], nnz_start, out=self.indptr[row_start + 1 : row_start + 1 + checked.n_cells])
        end = nnz_start + checked.nnz
        return self.indices[nnz_start:end], self.data[nnz_start:end]


def _decode_group(
    reader: TileReader,
    tiles: np.ndarray,
    row_starts: np.ndarray,
    nnz_starts: np.ndarray,
    blobs: list[bytes | memoryview] | None,
    outputs: _Outputs,
    counted: Callable[[int], None],
) -> bool:
    """A task: read (or take), check and decode a group of tiles; whether a count exceeds 2^24.

    Local tiles are read side by side into one buffer of the thread, checked one by one, then decoded
    together (:func:`~deltacells.codec.decode_tiles`: their small chunks in one kernel call); the bytes of
    remote ones (fetched ahead, each its own object) are checked and decoded one tile after the other.
    """
    if blobs is not None or reader.store.local_path(tile_path(int(tiles[0]))) is None:
        large = False
        for k, tile in enumerate(tiles.tolist()):
            blob = _read_one(reader, tile) if blobs is None else blobs[k]
            one = _checked(reader, tile, blob)
            indices, data = outputs.write_indptr(one, int(row_starts[k]), int(nnz_starts[k]))
            n_chunks = one.header.n_chunks
            large |= _decode_chunks(reader, tile, one, range(n_chunks), indices, data, outputs.columns)
            counted(n_chunks)
        return large
    whole, offsets, views, missing = _read_side_by_side(reader, tiles)
    checked: list[CheckedTile] = []
    for k, tile in enumerate(tiles[: len(views)].tolist()):
        try:
            checked.append(_checked(reader, tile, views[k]))
        except FormatError:
            _decode_checked(reader, tiles, checked, whole, offsets, nnz_starts, outputs)  # its errors first
            raise
        outputs.write_indptr(checked[-1], int(row_starts[k]), int(nnz_starts[k]))
    large = _decode_checked(reader, tiles, checked, whole, offsets, nnz_starts, outputs)
    if missing is not None:
        raise missing
    for tile in checked:
        counted(tile.header.n_chunks)
    return large


def _decode_checked(
    reader: TileReader,
    tiles: np.ndarray,
    checked: list[CheckedTile],
    whole: memoryview,
    offsets: np.ndarray,
    nnz_starts: np.ndarray,
    outputs: _Outputs,
) -> bool:
    """Decode the checked first tiles of a group together; a problem names the tile (and dataset)."""
    try:
        n = len(checked)
        return decode_tiles(checked, whole, offsets[:n], outputs.indices, outputs.data, nnz_starts[:n], outputs.columns)
    except FormatError as exc:  # raised by one tile's decoding, whose message starts with the tile's name
        named = [int(t) for t, c in zip(tiles.tolist(), checked, strict=False) if str(exc).startswith(f"{c.name}: ")]
        if not named:  # pragma: no cover - the decoder names the tile it decodes
            raise
        url = reader.store.url
        raise problem_from_error(tile_path(named[0]), exc, url=url).to_exception(url) from exc


_local = threading.local()  # .buffer: the decoding thread's buffer for the local tiles it reads


def _read_side_by_side(
    reader: TileReader, tiles: np.ndarray
) -> tuple[memoryview, np.ndarray, list[memoryview], MissingObjectError | None]:
    """Local tiles read into this thread's buffer, each from a multiple of 8 bytes.

    Returns the buffer, where each tile starts in it, views of the tiles read, and the error of the first
    tile missing (the tiles after it are not read; those before it are checked and decoded first).

    One byte more than the manifest's size is asked of each tile, so that a longer object shows (as a size
    that disagrees with ``tile_bytes``). The buffer is reused for the thread's next group: the tiles must be
    decoded before.
    """
    wanted = np.asarray(reader.manifest.tile_bytes, dtype=np.int64)[tiles] + 1
    slots = (wanted + 7) // 8 * 8
    offsets = np.zeros(tiles.shape[0], dtype=np.int64)
    np.cumsum(slots[:-1], out=offsets[1:])
    whole = memoryview(_buffer(int(slots.sum())))
    views: list[memoryview] = []
    for tile, offset, size in zip(tiles.tolist(), offsets.tolist(), wanted.tolist(), strict=True):
        path = reader.store.local_path(tile_path(tile))
        try:
            if path is None:  # a tile a reader holds in memory (its version of one an append rewrote)
                data = reader.store.read(tile_path(tile), 0, size)
                got = len(data)
                whole[offset : offset + got] = data
            else:
                descriptor = os.open(path, os.O_RDONLY)  # os's calls: a Python file object costs more than the read
                try:
                    got = os.readv(descriptor, [whole[offset : offset + size]])
                finally:
                    os.close(descriptor)
        except (FileNotFoundError, MissingObjectError) as exc:
            missing = missing_tile(tile, reader.fields).to_exception(reader.store.url)
            missing.__cause__ = exc
            assert isinstance(missing, MissingObjectError)
            return whole, offsets, views, missing
        views.append(whole[offset : offset + got])
    return whole, offsets, views, None


def _read_one(reader: TileReader, tile: int) -> bytes:
    """A tile's bytes from the store (one byte more than the manifest's size is asked for)."""
    try:
        return reader.store.read(tile_path(tile), 0, int(reader.manifest.tile_bytes[tile]) + 1)
    except MissingObjectError as exc:
        raise missing_tile(tile, reader.fields).to_exception(reader.store.url) from exc


def _buffer(size: int) -> bytearray:
    """The calling thread's read buffer, of ``size`` bytes or more (grown as needed, kept for the next group)."""
    buffer = getattr(_local, "buffer", None)
    if buffer is None or len(buffer) < size:
        buffer = _local.buffer = bytearray(max(size, 2 * len(buffer or b"")))
    return buffer


def _raise_earlier(decodes: deque[Future[bool]]) -> None:
    """Wait for the tasks queued (the tiles before one found broken), raising the first of their errors."""
    for future in decodes:
        future.result()


class _Fetches:
    """The tiles' bytes, fetched ahead on remote storage (``io_concurrency`` requests, ``prefetch_bytes``)."""

    def __init__(self, reader: TileReader, tiles: np.ndarray) -> None:
        self.reader, self.tiles = reader, tiles
        self.remote = not reader.store.is_local
        self.local = not self.remote  # tasks then read the tiles of their groups themselves
        self.ahead = max(2, reader.store.io_concurrency if self.remote else 0)
        self.futures: dict[int, Future[ReadBuffer]] = {}
        self.free: list[bytearray] = []  # buffers of local tiles decoded, for the next ones
        self.next = 0
        self.bytes = 0

    def take(self, k: int) -> tuple[bytearray | None, bytes | memoryview]:
        """Tile ``tiles[k]``'s bytes, and the pooled buffer holding them (local files) or None.

        One byte more than the manifest's size is asked for, so that a longer object shows (as a size that
        disagrees with ``tile_bytes``). A local file is read into a buffer given back (:meth:`give_back`)
        once the tile is decoded, so that reading allocates nothing per tile.
        """
        reader, tile = self.reader, int(self.tiles[k])
        sizes = reader.manifest.tile_bytes
        try:
            if not self.remote:
                path = reader.store.local_path(tile_path(tile))
                if path is None:
                    return None, reader.store.read(tile_path(tile), 0, int(sizes[tile]) + 1)
                buffer = self._buffer(int(sizes[tile]) + 1)
                with open(path, "rb") as file:
                    got = file.readinto(memoryview(buffer)[: int(sizes[tile]) + 1])
                return buffer, memoryview(buffer)[:got]
            while self.next < self.tiles.shape[0] and self.next < k + self.ahead:
                size = int(sizes[self.tiles[self.next]])
                if self.next > k and self.bytes + size > reader.prefetch_bytes:
                    break
                self.futures[self.next] = reader._submit_fetch(int(self.tiles[self.next]))
                self.bytes += size
                self.next += 1
            self.bytes -= int(sizes[tile])
            return None, self.futures.pop(k).result()
        except (MissingObjectError, FileNotFoundError) as exc:
            raise missing_tile(tile, reader.fields).to_exception(reader.store.url) from exc

    def give_back(self, buffer: bytearray) -> None:
        """Return a decoded tile's buffer, for the next tiles of this read."""
        self.free.append(buffer)

    def _buffer(self, size: int) -> bytearray:
        for i, buffer in enumerate(self.free):
            if len(buffer) >= size:
                return self.free.pop(i)
        return bytearray(size)

    def cancel(self) -> None:
        for future in self.futures.values():
            future.cancel()


def _checked(reader: TileReader, tile: int, blob: Any) -> CheckedTile:
    """The tile's bytes checked whole and against the manifest (the first problem raised)."""
    url = reader.store.url
    checked = first_problem_raises(check_tile_bytes_against(blob, tile, reader.fields, url=url), url)
    assert checked is not None
    return checked


def _decode_chunks(
    reader: TileReader,
    tile: int,
    checked: CheckedTile,
    chunks: Iterable[int],
    indices: np.ndarray,
    data: np.ndarray,
    columns: np.ndarray | None,
) -> bool:
    """Decode chunks of a checked tile into their parts of the output; a problem names the tile (and dataset)."""
    try:
        return checked.decode_chunks(chunks, indices, data, columns)
    except FormatError as exc:
        url = reader.store.url
        raise problem_from_error(tile_path(tile), exc, url=url).to_exception(url) from exc
