"""Whole tiles decoded straight into one output CSR: the path of full reads and of ranges of cells.

A read that wants whole tiles has no use for the tiles themselves: each one would be decoded into arrays
of its own, then copied into the output and converted to the output's dtype. Here the output is allocated
first (its size is the manifest's ``tile_nnz``, which every tile's header is checked against before a byte
is written), and each tile's chunks are decoded into their slices of it, in the output's dtype: every
nonzero is written once. Tiles decode in parallel (one task per tile, or the chunks of one tile when there
are fewer tiles than threads) while the next ones are fetched; nothing goes through the tile cache.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import numpy as np

from deltacells._threads import shared_pool
from deltacells.errors import FormatError, MissingObjectError
from deltacells.format import (
    check_tile_bytes_against,
    first_problem_raises,
    missing_tile,
    problem_from_error,
    tile_path,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from deltacells.tiles._reader import TileReader

__all__ = ["DIRECT_DTYPES", "read_tiles_into"]

#: Value dtypes the decoder writes directly (numba compiles a kernel for each).
DIRECT_DTYPES = frozenset(np.dtype(t) for t in (np.int32, np.int64, np.float32, np.float64))


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

    Raises
    ------
    FormatError
        If a tile breaks a rule of the format or disagrees with the manifest.
    MissingObjectError
        If a tile is not there.
    """
    n = tiles.shape[0]
    if n == 0:
        return False
    n_threads = reader.n_threads
    local = reader.store.is_local
    if n_threads <= 1 or n < n_threads:
        # Few tiles: one after the other, each one's chunks in parallel (fetched ahead when remote).
        fetches: list[Future[bytes] | None] = [None] * n
        large = False
        for k in range(n):
            if not local:  # this tile's fetch, if not started, and the next one's
                for ahead in range(k, min(k + 2, n)):
                    if fetches[ahead] is None:
                        fetches[ahead] = reader._submit_fetch(int(tiles[ahead]))
            args = (row_starts[k], nnz_starts[k], out_indptr, out_indices, out_data)
            large |= _decode_one(reader, int(tiles[k]), fetches[k], *args, threads=n_threads, counted=counted)
            fetches[k] = None
        return large
    return _pipeline(reader, tiles, row_starts, nnz_starts, out_indptr, out_indices, out_data, counted=counted)


def _pipeline(
    reader: TileReader,
    tiles: np.ndarray,
    row_starts: np.ndarray,
    nnz_starts: np.ndarray,
    out_indptr: np.ndarray,
    out_indices: np.ndarray,
    out_data: np.ndarray,
    *,
    counted: Callable[[int], None],
) -> bool:
    """One task per tile on the shared pool, a bounded number ahead; remote tiles fetched further ahead."""
    n = tiles.shape[0]
    local = reader.store.is_local
    decode_ahead = reader.batch_size
    fetch_ahead = max(decode_ahead + 1, 1 if local else reader.store.io_concurrency)
    sizes = reader.manifest.tile_bytes
    pool = shared_pool()
    fetches: dict[int, Future[Any]] = {}
    decodes: deque[Future[bool]] = deque()
    ahead_bytes = next_fetch = 0
    large = False
    try:
        for k in range(n):
            while not local and next_fetch < n and next_fetch < k + fetch_ahead:
                size = int(sizes[tiles[next_fetch]])
                if next_fetch > k + decode_ahead and ahead_bytes + size > reader.prefetch_bytes:
                    break
                fetches[next_fetch] = reader._submit_fetch(int(tiles[next_fetch]))
                ahead_bytes += size
                next_fetch += 1
            fetched = fetches.pop(k, None)
            if fetched is not None:
                ahead_bytes -= int(sizes[tiles[k]])
            args = (row_starts[k], nnz_starts[k], out_indptr, out_indices, out_data)
            decodes.append(pool.submit(_decode_one, reader, int(tiles[k]), fetched, *args, threads=1, counted=counted))
            while len(decodes) > decode_ahead:
                large |= decodes.popleft().result()
        while decodes:
            large |= decodes.popleft().result()
    finally:
        for future in (*decodes, *fetches.values()):
            future.cancel()
    return large


def _decode_one(
    reader: TileReader,
    tile: int,
    fetched: Future[bytes] | None,
    row_start: int,
    nnz_start: int,
    out_indptr: np.ndarray,
    out_indices: np.ndarray,
    out_data: np.ndarray,
    *,
    threads: int,
    counted: Callable[[int], None],
) -> bool:
    """Read (or take the fetched bytes of) one tile, check it whole, decode it into its slices of the output."""
    store, fields, url = reader.store, reader.fields, reader.store.url
    try:
        blob = store.read(tile_path(tile), 0, int(reader.manifest.tile_bytes[tile]) + 1) if fetched is None else None
        if blob is None:
            assert fetched is not None
            blob = fetched.result()
    except MissingObjectError as exc:
        raise missing_tile(tile, fields).to_exception(url) from exc
    checked = first_problem_raises(check_tile_bytes_against(blob, tile, fields, url=url), url)
    assert checked is not None
    nnz_start, row_start = int(nnz_start), int(row_start)
    nnz_stop = nnz_start + checked.nnz
    try:
        large = checked.decode_into(out_indices[nnz_start:nnz_stop], out_data[nnz_start:nnz_stop], threads=threads)
    except FormatError as exc:
        raise problem_from_error(tile_path(tile), exc, url=url).to_exception(url) from exc
    # Entry row_start is the end of what precedes this tile (indptr[0] == 0 is checked): not written here.
    np.add(checked.indptr[1:], nnz_start, out=out_indptr[row_start + 1 : row_start + 1 + checked.n_cells])
    counted(int(checked.header.n_chunks))
    return large
