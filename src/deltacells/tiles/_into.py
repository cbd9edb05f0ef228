"""Whole tiles decoded straight into one output CSR: the path of full reads and of ranges of cells.

A read that wants whole tiles has no use for the tiles themselves: each one would be decoded into arrays
of its own, then copied into the output and converted to the output's dtype. Here the output is allocated
first (its size is the manifest's ``tile_nnz``, which every tile's header is checked against before a byte
is written), and each tile's chunks are decoded into their slices of it, in the output's dtype: every
nonzero is written once. Nothing goes through the tile cache.

The calling thread reads each tile (or takes its bytes, fetched ahead on remote storage) and checks it
whole (size, header, CRC-32, chunk table, indptr, frame sizes, counts against the manifest); its chunks
then decode on the shared pool, a bounded number ahead. Runs of chunks (of about
:data:`~deltacells.codec.WORK_UNIT_NNZ` nonzeros), not tiles, are the unit of work, so two threads stay busy
even on a dataset of two tiles of unequal size, however finely the tiles are chunked.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import numpy as np

from deltacells._threads import shared_pool
from deltacells.codec import work_units
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
    from deltacells.tiles._reader import TileReader

__all__ = ["DIRECT_DTYPES", "read_tiles_into"]

#: Value dtypes the decoder writes directly (numba compiles a kernel for each).
DIRECT_DTYPES = frozenset(np.dtype(t) for t in (np.int32, np.int64, np.float32, np.float64))

#: Units of work (runs of chunks, :func:`~deltacells.codec.work_units`) queued on the pool per decoding thread
#: (enough to keep them busy while the next tile is checked).
UNITS_AHEAD_PER_THREAD = 4


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
        If a tile breaks a rule of the format or disagrees with the manifest.
    MissingObjectError
        If a tile is not there.
    """
    n = tiles.shape[0]
    n_threads = reader.n_threads
    pool = shared_pool() if n_threads > 1 else None
    fetches = _Fetches(reader, tiles)
    decodes: deque[Future[bool]] = deque()
    held: deque[tuple[bytearray, list[Future[bool]]]] = deque()  # a tile's buffer, until its chunks are done
    large = False
    try:
        for k in range(n):
            tile, nnz_start = int(tiles[k]), int(nnz_starts[k])
            buffer, blob = fetches.take(k)
            checked = _checked(reader, tile, blob)
            # Entry row_starts[k] is the end of what precedes this tile (indptr[0] == 0 is checked).
            row_start = int(row_starts[k])
            np.add(checked.indptr[1:], nnz_start, out=out_indptr[row_start + 1 : row_start + 1 + checked.n_cells])
            indices = out_indices[nnz_start : nnz_start + checked.nnz]
            data = out_data[nnz_start : nnz_start + checked.nnz]
            n_chunks = checked.header.n_chunks
            futures: list[Future[bool]] = []
            if pool is None:
                large |= _decode_chunks(reader, tile, checked, range(n_chunks), indices, data, columns)
            else:
                for unit in work_units(checked.table, np.arange(n_chunks)):
                    futures.append(pool.submit(_decode_chunks, reader, tile, checked, unit, indices, data, columns))
                    decodes.append(futures[-1])
                    while len(decodes) > UNITS_AHEAD_PER_THREAD * n_threads:
                        large |= decodes.popleft().result()
            if buffer is not None:
                held.append((buffer, futures))
            while held and all(future.done() for future in held[0][1]):
                fetches.give_back(held.popleft()[0])
            counted(n_chunks)
        while decodes:
            large |= decodes.popleft().result()
    finally:
        for future in decodes:
            future.cancel()
        fetches.cancel()
    return large


class _Fetches:
    """The tiles' bytes, fetched ahead on remote storage (``io_concurrency`` requests, ``prefetch_bytes``)."""

    def __init__(self, reader: TileReader, tiles: np.ndarray) -> None:
        self.reader, self.tiles = reader, tiles
        self.remote = not reader.store.is_local
        self.ahead = max(2, reader.store.io_concurrency if self.remote else 0)
        self.futures: dict[int, Future[bytes]] = {}
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
