"""Cells of many tiles read by the chunks that hold them, straight into one CSR, past the tile cache.

A training loader reads windows of a few thousand cells, in runs from many tiles, shuffled, and comes back
to a chunk only in the next epoch. Through the tile cache, each such read would decode a tile's chunks
into a partial tile, merge it with what the cache held of the tile (a copy of its arrays each time), then
copy the wanted rows out of it, for a tile nobody reads again soon. Here each tile holding a wanted cell is
read once (whole on a local disk and checked with its CRC-32; on remote storage whole or in byte ranges,
as :func:`~deltacells.tiles._ranged.ranged_read_pays` decides); the output's row pointers are made from
the tiles' checked ``indptr``; then each chunk holding a wanted cell is a task of the shared pool that
decodes it into arrays of its own, in the output's dtype, genes mapped (and each row sorted) as it
decodes, and copies its wanted rows to their places in the output while they are still in the core's
cache. Each nonzero is written twice, by one thread, and nothing is kept.

Tiles are checked before anything is allocated (size, header and counts against the manifest, the chunk
table and the declared sizes of the frames decoded), so a malformed tile raises a
:class:`~deltacells.FormatError` naming it, never an allocation of what it claims.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from scipy import sparse

from deltacells._threads import shared_pool
from deltacells.errors import FormatError, MissingObjectError
from deltacells.format import (
    check_tile,
    check_tile_bytes_against,
    first_problem_raises,
    missing_tile,
    problem_from_error,
    tile_path,
)
from deltacells.tiles._ranged import HeaderCounts, ranged_read_pays, submit_ranged_fetch

if TYPE_CHECKING:
    from deltacells.codec._decode import CheckedTile
    from deltacells.tiles._reader import TileReader

__all__ = ["read_rows_by_chunk"]

#: Chunk nonzeros at or above which a read's chunks decode on the shared pool (below, on the calling thread).
PARALLEL_MIN_NNZ = 1 << 16


class _Chunks(NamedTuple):
    """One tile's part of a read: the tile, checked, and the chunks of it to decode."""

    tile: int
    checked: CheckedTile
    chunks: np.ndarray


def read_rows_by_chunk(
    reader: TileReader,
    rows: np.ndarray,
    *,
    dtype: np.dtype,
    columns: np.ndarray | None = None,
    sort: bool = True,
) -> tuple[sparse.csr_matrix, bool]:
    """Cells ``rows``, in that order, as a CSR matrix: each chunk holding one decoded once, past the tile cache.

    Parameters
    ----------
    reader
        The dataset's tile reader (its store, manifest, threads and counters).
    rows
        Dataset cell numbers, in the order of the output's rows (repeats allowed).
    dtype
        dtype of the values: one the decoder writes directly (int32, int64, float32 or float64).
    columns
        ``int32[n_genes]``: the output column of each stored gene (None: the stored order).
    sort
        With ``columns``, sort each row's columns (a canonical CSR); else they stay in stored order.

    Returns
    -------
    tuple
        The matrix (``len(rows) x n_genes``; int32 indices unless its nonzeros need int64), and whether a
        count exceeds 2^24 (not exact in float32).

    Raises
    ------
    FormatError
        If a tile read breaks a rule of the format or disagrees with the manifest.
    MissingObjectError
        If a tile is not there.
    """
    rows = np.asarray(rows, dtype=np.int64)
    manifest = reader.manifest
    starts = np.asarray(manifest.starts, dtype=np.int64)
    order = np.argsort(rows, kind="stable")
    ordered = rows[order]
    tiles = np.searchsorted(starts, ordered, side="right") - 1
    needed, first = np.unique(tiles, return_index=True)
    bounds = np.append(first, rows.shape[0])
    wanted = [ordered[bounds[k] : bounds[k + 1]] - starts[t] for k, t in enumerate(needed.tolist())]
    parts = _checked_tiles(reader, needed, wanted)

    lengths = np.empty(rows.shape[0], dtype=np.int64)
    for k, part in enumerate(parts):  # each wanted cell's row length, from its tile's (checked) indptr
        indptr = part.checked.indptr
        lengths[order[bounds[k] : bounds[k + 1]]] = indptr[wanted[k] + 1] - indptr[wanted[k]]
    out_indptr = np.zeros(rows.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=out_indptr[1:])
    nnz = int(out_indptr[-1])
    out_indices = np.empty(nnz, dtype=np.int32 if nnz < 2**31 else np.int64)
    out_data = np.empty(nnz, dtype=dtype)
    jobs = [
        (part, chunk, wanted[k], order[bounds[k] : bounds[k + 1]])
        for k, part in enumerate(parts)
        for chunk in part.chunks.tolist()
    ]
    reader.count_reads(chunks=len(jobs))

    def decode(part: _Chunks, chunk: int, local: np.ndarray, slots: np.ndarray) -> bool:
        return _decode_chunk_rows(reader, part, chunk, local, slots, out_indptr, out_indices, out_data, columns, sort)

    if reader.n_threads > 1 and len(jobs) > 1 and nnz >= PARALLEL_MIN_NNZ:
        futures = [shared_pool().submit(decode, *job) for job in jobs]
        large = [future.result() for future in futures]  # every one (a failed decode raises here)
    else:
        large = [decode(*job) for job in jobs]
    matrix = sparse.csr_matrix(
        (out_data, out_indices, out_indptr.astype(out_indices.dtype, copy=False)),
        shape=(rows.shape[0], manifest.n_genes),
        copy=False,
    )
    return matrix, any(large)


def _decode_chunk_rows(
    reader: TileReader,
    part: _Chunks,
    chunk: int,
    local: np.ndarray,
    slots: np.ndarray,
    out_indptr: np.ndarray,
    out_indices: np.ndarray,
    out_data: np.ndarray,
    columns: np.ndarray | None,
    sort: bool,
) -> bool:
    """Decode one chunk into arrays of its own, then copy the rows of its wanted cells to their output rows.

    ``local`` are the tile's wanted cells (sorted; those of this chunk are a run of them) and ``slots``
    their output rows. The chunk's arrays are still in this core's cache when its rows are copied.
    """
    from deltacells.codec._layout import CELL_HI, CELL_LO, NNZ_HI, NNZ_LO
    from deltacells.tiles._gather import gather_rows  # numba loads on the first decode

    row = part.checked.table[chunk]
    cell_lo, cell_hi, nnz_lo, nnz_hi = (int(row[k]) for k in (CELL_LO, CELL_HI, NNZ_LO, NNZ_HI))
    lo, hi = np.searchsorted(local, [cell_lo, cell_hi])
    indices = np.empty(nnz_hi - nnz_lo, dtype=np.int32)
    data = np.empty(nnz_hi - nnz_lo, dtype=out_data.dtype)
    try:
        large = part.checked.decode_chunk_into(chunk, indices, data, columns, sort=sort)
    except FormatError as exc:
        url = reader.store.url
        raise problem_from_error(tile_path(part.tile), exc, url=url).to_exception(url) from exc
    indptr = np.asarray(part.checked.indptr[cell_lo : cell_hi + 1], dtype=np.int64) - nnz_lo
    gather_rows(indptr, indices, data, local[lo:hi] - cell_lo, out_indptr, slots[lo:hi], out_indices, out_data)
    return large


def _checked_tiles(reader: TileReader, tiles: np.ndarray, wanted: list[np.ndarray]) -> list[_Chunks]:
    """Each tile read and checked (in parallel), with the chunks holding its wanted cells."""
    store = reader.store
    if store.is_local:
        if tiles.shape[0] > 1 and reader.n_threads > 1:
            pool = shared_pool()
            futures = [pool.submit(_read_local, reader, int(t), w) for t, w in zip(tiles, wanted, strict=True)]
            return [future.result() for future in futures]
        return [_read_local(reader, int(t), w) for t, w in zip(tiles, wanted, strict=True)]
    fetches: list[tuple[int, bool, Future[Any], np.ndarray]] = []
    for t, w in zip(tiles.tolist(), wanted, strict=True):
        if ranged_read_pays(store, reader.manifest, t, w.shape[0], cells=w):
            fetches.append((t, True, submit_ranged_fetch(store, reader.manifest, t, w), w))
        else:
            fetches.append((t, False, reader._submit_fetch(t), w))
    try:
        return [_from_fetch(reader, t, ranged, fetched, w) for t, ranged, fetched, w in fetches]
    finally:
        for _, _, fetched, _ in fetches:
            fetched.cancel()


def _read_local(reader: TileReader, tile: int, wanted: np.ndarray) -> _Chunks:
    """A local tile read whole and checked (its CRC-32 included), with the chunks holding ``wanted``."""
    store = reader.store
    try:
        blob = store.read(tile_path(tile), 0, int(reader.manifest.tile_bytes[tile]) + 1)
    except MissingObjectError as exc:
        raise missing_tile(tile, reader.fields).to_exception(store.url) from exc
    checked = first_problem_raises(check_tile_bytes_against(blob, tile, reader.fields, url=store.url), store.url)
    assert checked is not None
    reader.count_reads(whole=1)
    return _Chunks(tile, checked, _chunks_holding(checked.table, wanted))


def _from_fetch(reader: TileReader, tile: int, ranged: bool, fetched: Future[Any], wanted: np.ndarray) -> _Chunks:
    """A remote tile from its fetch: whole (checked as a local one) or in ranges (prefix and frames)."""
    from deltacells.codec._partial import checked_pieces

    store = reader.store
    try:
        got = fetched.result()
    except MissingObjectError as exc:
        raise missing_tile(tile, reader.fields).to_exception(store.url) from exc
    if not ranged:
        checked = first_problem_raises(check_tile_bytes_against(got, tile, reader.fields, url=store.url), store.url)
        assert checked is not None
        reader.count_reads(whole=1)
        return _Chunks(tile, checked, _chunks_holding(checked.table, wanted))
    prefix, pieces, chunks, _ = got
    header = prefix.header
    first_problem_raises(
        check_tile(HeaderCounts(header.n_cells, header.nnz, header.n_genes), tile, reader.fields), store.url
    )
    where = f"{store.url.rstrip('/')}/{tile_path(tile)}"
    try:
        checked = checked_pieces(prefix, pieces, chunks, name=where)
    except FormatError as exc:
        raise problem_from_error(tile_path(tile), exc, url=store.url).to_exception(store.url) from exc
    reader.count_reads(ranged=1)
    return _Chunks(tile, checked, np.asarray(chunks, dtype=np.intp))


def _chunks_holding(table: np.ndarray, cells: np.ndarray) -> np.ndarray:
    """The chunks (sorted, each once) holding tile-local ``cells`` (checked below the tile's cells)."""
    from deltacells.codec._layout import CELL_HI

    return np.unique(np.searchsorted(table[:, CELL_HI].astype(np.int64), cells, side="right")).astype(np.intp)
