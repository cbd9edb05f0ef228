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

from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from scipy import sparse

from deltacells._memory import empty, scratch
from deltacells._threads import shared_pool
from deltacells.codec import CELL_HI, CELL_LO, NNZ_HI, NNZ_LO, TilePrefix, checked_pieces
from deltacells.errors import FormatError, MissingObjectError
from deltacells.format import (
    check_tile,
    check_tile_bytes_against,
    first_problem_raises,
    missing_tile,
    problem_from_error,
    tile_path,
)
from deltacells.tiles._gathering import gather_rows_split, gather_rows_split_sorted
from deltacells.tiles._ranged import RANGED_MAX_SHARE, HeaderCounts, ranged_read_pays, submit_ranged_fetch

if TYPE_CHECKING:
    from deltacells.codec import CheckedTile
    from deltacells.storage import ReadBuffer
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
    cuts: np.ndarray | None = None,
    threads: int | None = None,
    fetched: Callable[[int], Future[ReadBuffer] | None] | None = None,
    n_columns: int | None = None,
) -> tuple[list[sparse.csr_matrix], bool]:
    """Cells ``rows``, in that order, as CSR matrices: each chunk holding one decoded once, past the tile cache.

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
    cuts
        Where the output is cut into matrices of their own: increasing row numbers from 0 to ``len(rows)``
        (default: one matrix). Each is written in place, not cut from a larger one (a training loader's
        batches: scipy copies a matrix made of views of larger arrays).
    threads
        Threads reading tiles and decoding chunks (the shared pool's), or 1: all on the calling thread
        (for a caller that reads several windows at once, each on a thread of its own); default: the
        reader's.
    fetched
        ``fetched(tile)``: the fetch of a tile being read whole already (its bytes checked whole, CRC-32
        included, as a tile read whole here), or None to read it here; None: every tile read here.
    n_columns
        Columns of the matrices (default: the stored genes'); ``columns`` maps into them.

    Returns
    -------
    tuple
        The matrices (rows ``cuts[k] .. cuts[k + 1] - 1`` of the output, ``x n_genes``; int32 indices unless
        their nonzeros need int64), and whether a count exceeds 2^24 (not exact in float32).

    Raises
    ------
    FormatError
        If a tile read breaks a rule of the format or disagrees with the manifest.
    MissingObjectError
        If a tile is not there.
    """
    rows = np.asarray(rows, dtype=np.int64)
    n = rows.shape[0]
    cuts = np.array([0, n], dtype=np.int64) if cuts is None else np.asarray(cuts, dtype=np.int64)
    manifest = reader.manifest
    starts = np.asarray(manifest.starts, dtype=np.int64)
    order = np.argsort(rows, kind="stable")
    ordered = rows[order]
    tiles = np.searchsorted(starts, ordered, side="right") - 1
    needed, first = np.unique(tiles, return_index=True)
    bounds = np.append(first, n)
    wanted = [ordered[bounds[k] : bounds[k + 1]] - starts[t] for k, t in enumerate(needed.tolist())]
    parallel = (reader.n_threads if threads is None else threads) > 1
    parts = _checked_tiles(reader, needed, wanted, parallel=parallel, fetched=fetched)

    lengths = np.empty(n, dtype=np.int64)
    for k, part in enumerate(parts):  # each wanted cell's row length, from its tile's (checked) indptr
        indptr = part.checked.indptr
        lengths[order[bounds[k] : bounds[k + 1]]] = indptr[wanted[k] + 1] - indptr[wanted[k]]
    outputs = SplitOutputs(lengths, cuts, dtype)
    jobs = [
        (part, chunk, wanted[k], order[bounds[k] : bounds[k + 1]])
        for k, part in enumerate(parts)
        for chunk in part.chunks.tolist()
    ]
    reader.count_reads(chunks=len(jobs))

    def decode(part: _Chunks, chunk: int, local: np.ndarray, slots: np.ndarray) -> bool:
        return _decode_chunk_rows(reader, part, chunk, local, slots, outputs, columns, sort)

    if parallel and len(jobs) > 1 and outputs.nnz >= PARALLEL_MIN_NNZ:
        futures = [shared_pool().submit(decode, *job) for job in jobs]
        large = [future.result() for future in futures]  # every one (a failed decode raises here)
    else:
        large = [decode(*job) for job in jobs]
    return outputs.matrices(manifest.n_genes if n_columns is None else n_columns), any(large)


class SplitOutputs:
    """The output matrices' arrays, laid end to end; and for each output row, its matrix and row in it.

    Output ``k``'s row pointers are ``indptrs[indptr_starts[k] : indptr_starts[k + 1]]`` (from 0), its nonzeros
    ``indices[nnz_starts[k] : nnz_starts[k + 1]]`` (and ``data``): one allocation for all, each matrix made of
    slices of its own (:meth:`matrices`). :meth:`kernel_arguments` are these for the gather kernels.
    """

    def __init__(self, lengths: np.ndarray, cuts: np.ndarray, dtype: np.dtype) -> None:
        n_pieces = cuts.shape[0] - 1
        rows_per_piece = np.diff(cuts)
        self.piece = np.repeat(np.arange(n_pieces, dtype=np.int64), rows_per_piece)
        self.row = np.arange(lengths.shape[0], dtype=np.int64) - cuts[self.piece]
        self.indptr_starts = np.concatenate(([0], np.cumsum(rows_per_piece + 1))).astype(np.int64)
        self.indptrs = np.zeros(int(self.indptr_starts[-1]), dtype=np.int64)
        sizes = np.zeros(n_pieces, dtype=np.int64)
        for k in range(n_pieces):
            indptr = self.indptrs[self.indptr_starts[k] : self.indptr_starts[k + 1]]
            np.cumsum(lengths[cuts[k] : cuts[k + 1]], out=indptr[1:])
            sizes[k] = indptr[-1]
        self.nnz = int(sizes.sum())
        self.nnz_starts = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        index_dtype = np.int32 if int(sizes.max(initial=0)) < 2**31 else np.int64
        self.indices, self.data = empty(self.nnz, index_dtype), empty(self.nnz, dtype)

    def kernel_arguments(self) -> tuple[np.ndarray, ...]:
        """``indptr_starts, indptrs, nnz_starts, indices, data``: the outputs as the gather kernels take them."""
        return self.indptr_starts, self.indptrs, self.nnz_starts, self.indices, self.data

    def matrices(self, n_genes: int) -> list[sparse.csr_matrix]:
        matrices = []
        for k in range(self.indptr_starts.shape[0] - 1):
            indptr = self.indptrs[self.indptr_starts[k] : self.indptr_starts[k + 1]]
            lo, hi = int(self.nnz_starts[k]), int(self.nnz_starts[k + 1])
            indices = self.indices[lo:hi]
            shape = (indptr.shape[0] - 1, n_genes)
            matrices.append(_csr_of(self.data[lo:hi], indices, indptr.astype(indices.dtype, copy=True), shape))
        return matrices


def _csr_of(data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, shape: tuple[int, int]) -> sparse.csr_matrix:
    """A CSR matrix holding these arrays themselves, slices of a larger allocation as they are.

    scipy's constructor copies an array that is a view of less than half of its base (``_prune_array``), which
    would copy every piece of :class:`SplitOutputs`; the arrays are set on the matrix instead, after the checks the
    constructor makes on an empty one of the same shape.
    """
    matrix = sparse.csr_matrix(shape, dtype=data.dtype)
    matrix.indptr, matrix.indices, matrix.data = indptr, indices, data
    return matrix


def _decode_chunk_rows(
    reader: TileReader,
    part: _Chunks,
    chunk: int,
    local: np.ndarray,
    slots: np.ndarray,
    outputs: SplitOutputs,
    columns: np.ndarray | None,
    sort: bool,
) -> bool:
    """Decode one chunk into arrays of its own, then copy the rows of its wanted cells to their output rows.

    ``local`` are the tile's wanted cells (sorted; those of this chunk are a run of them) and ``slots``
    their output rows. The chunk's arrays are still in this core's cache when its rows are copied.
    """
    row = part.checked.table[chunk]
    cell_lo, cell_hi, nnz_lo, nnz_hi = (int(row[k]) for k in (CELL_LO, CELL_HI, NNZ_LO, NNZ_HI))
    lo, hi = np.searchsorted(local, [cell_lo, cell_hi])
    # The chunk's arrays are copied out before this returns: this thread's scratch, not fresh memory each time.
    indices = scratch("chunk indices", nnz_hi - nnz_lo, np.int32)
    data = scratch("chunk data", nnz_hi - nnz_lo, outputs.data.dtype)
    try:
        # Mapped rows are sorted as they are copied out (only those wanted, and one pass fewer).
        large = part.checked.decode_chunk_into(chunk, indices, data, columns, sort=False)
    except FormatError as exc:
        url = reader.store.url
        raise problem_from_error(tile_path(part.tile), exc, url=url).to_exception(url) from exc
    indptr = np.asarray(part.checked.indptr[cell_lo : cell_hi + 1], dtype=np.int64) - nnz_lo
    mine = slots[lo:hi]
    where = (local[lo:hi] - cell_lo, outputs.piece[mine], outputs.row[mine])
    if columns is not None and sort:
        gather_rows_split_sorted(indptr, indices, data, *where, *outputs.kernel_arguments(), columns.shape[0])
    else:
        gather_rows_split(indptr, indices, data, *where, *outputs.kernel_arguments())
    return large


def _checked_tiles(
    reader: TileReader,
    tiles: np.ndarray,
    wanted: list[np.ndarray],
    *,
    parallel: bool,
    fetched: Callable[[int], Future[ReadBuffer] | None] | None = None,
) -> list[_Chunks]:
    """Each tile read and checked, with the chunks holding its wanted cells.

    A tile that ``fetched`` gives a fetch of (a caller's, fetched whole) is taken from it and checked whole.

    A tile whose prefix the reader keeps (from an earlier read) is read in ranges, only the frames of the
    chunks wanted, when those are at most ``RANGED_MAX_SHARE`` of its bytes; else it is read whole (and
    its CRC-32 checked). A local tile's prefix is kept only from a whole read, so each tile's CRC-32 is
    checked the first time it is read. A remote tile whose prefix is not kept is read in ranges (its
    prefix, then the frames) when :func:`ranged_read_pays` says so. Local tiles are read on the shared pool
    (``parallel``), remote ones with the store's requests in flight at once.
    """
    store = reader.store
    manifest = reader.manifest
    if fetched is not None:
        given = [fetched(t) for t in tiles.tolist()]
        mine = [k for k, fetch in enumerate(given) if fetch is None]
        if len(mine) < len(given):  # the caller's fetches, checked whole here; the other tiles read as usual
            read = iter(_checked_tiles(reader, tiles[mine], [wanted[k] for k in mine], parallel=parallel))
            return [
                next(read) if fetch is None else _from_fetch(reader, t, False, fetch, w)
                for t, fetch, w in zip(tiles.tolist(), given, wanted, strict=True)
            ]
    plans = []
    for t, w in zip(tiles.tolist(), wanted, strict=True):
        prefix = reader.prefix_of(t)
        if prefix is not None:
            chunks = _chunks_holding(prefix.table, w)
            frames = prefix.frame_bytes(chunks) <= RANGED_MAX_SHARE * int(manifest.tile_bytes[t])
            plans.append((t, w, (prefix, chunks) if frames else None, frames))
        else:
            plans.append((t, w, None, ranged_read_pays(store, manifest, t, w.shape[0], cells=w)))
    if store.is_local:
        reads = [
            # A local tile is read in ranges only with a kept prefix (ranged_read_pays is False on local storage).
            (_read_local_ranged, reader, t, *known) if ranged and known is not None else (_read_local, reader, t, w)
            for t, w, known, ranged in plans
        ]
        if len(reads) > 1 and parallel:
            pool = shared_pool()
            futures = [pool.submit(*read) for read in reads]
            return [future.result() for future in futures]
        return [read[0](*read[1:]) for read in reads]
    fetches: list[tuple[int, bool, Future[Any], np.ndarray]] = []
    try:
        for t, w, known, ranged in plans:
            if ranged:
                prefix = None if known is None else known[0]
                fetches.append((t, True, submit_ranged_fetch(store, manifest, t, w, prefix=prefix), w))
            else:
                fetches.append((t, False, reader._submit_fetch(t), w))
        return [_from_fetch(reader, t, ranged, fetched, w) for t, ranged, fetched, w in fetches]
    finally:
        for _, _, pending, _ in fetches:
            pending.cancel()


def _read_local(reader: TileReader, tile: int, wanted: np.ndarray) -> _Chunks:
    """A local tile read whole and checked (its CRC-32 included), with the chunks holding ``wanted``."""
    store = reader.store
    try:
        blob = store.read(tile_path(tile), 0, int(reader.manifest.tile_bytes[tile]) + 1)
    except MissingObjectError as exc:
        raise missing_tile(tile, reader.fields).to_exception(store.url) from exc
    return _whole(reader, tile, blob, wanted)


def _whole(reader: TileReader, tile: int, blob: Any, wanted: np.ndarray) -> _Chunks:
    """A tile's whole bytes checked (CRC-32 included) against the manifest; its prefix kept for the next reads."""
    url = reader.store.url
    checked = first_problem_raises(check_tile_bytes_against(blob, tile, reader.fields, url=url), url)
    assert checked is not None
    reader.count_reads(whole=1)
    prefix = TilePrefix(checked.header, np.array(checked.indptr, dtype=np.int64), checked.table.copy())
    prefix.indptr.flags.writeable = prefix.table.flags.writeable = False
    reader.keep_prefix(tile, prefix)
    return _Chunks(tile, checked, _chunks_holding(checked.table, wanted))


def _read_local_ranged(reader: TileReader, tile: int, prefix: TilePrefix, chunks: np.ndarray) -> _Chunks:
    """The frames of ``chunks`` of a local tile whose prefix (and CRC-32) was checked before."""
    store = reader.store
    name = tile_path(tile)
    try:
        pieces = [(start, store.read(name, start, end)) for start, end in prefix.frame_ranges(chunks)]
    except MissingObjectError as exc:
        raise missing_tile(tile, reader.fields).to_exception(store.url) from exc
    return _ranged(reader, tile, prefix, pieces, chunks)


def _ranged(reader: TileReader, tile: int, prefix: TilePrefix, pieces: Any, chunks: np.ndarray) -> _Chunks:
    """A tile to decode the ``chunks`` of, from its checked prefix and their frames (their sizes checked)."""
    url = reader.store.url
    where = f"{url.rstrip('/')}/{tile_path(tile)}"
    try:
        checked = checked_pieces(prefix, pieces, chunks, name=where)
    except FormatError as exc:
        raise problem_from_error(tile_path(tile), exc, url=url).to_exception(url) from exc
    reader.count_reads(ranged=1)
    return _Chunks(tile, checked, np.asarray(chunks, dtype=np.intp))


def _from_fetch(reader: TileReader, tile: int, ranged: bool, fetched: Future[Any], wanted: np.ndarray) -> _Chunks:
    """A remote tile from its fetch: whole (checked as a local one) or in ranges (prefix and frames)."""
    store = reader.store
    try:
        got = fetched.result()
    except MissingObjectError as exc:
        raise missing_tile(tile, reader.fields).to_exception(store.url) from exc
    if not ranged:
        return _whole(reader, tile, got, wanted)
    prefix, pieces, chunks, _ = got
    if reader.prefix_of(tile) is not prefix:  # a prefix fetched now: checked against the manifest, then kept
        header = prefix.header
        counts = HeaderCounts(header.n_cells, header.nnz, header.n_genes)
        first_problem_raises(check_tile(counts, tile, reader.fields), store.url)
        reader.keep_prefix(tile, prefix)
    return _ranged(reader, tile, prefix, pieces, chunks)


def _chunks_holding(table: np.ndarray, cells: np.ndarray) -> np.ndarray:
    """The chunks (sorted, each once) holding tile-local ``cells`` (sorted; below the tile's cells, as checked)."""
    chunks = np.searchsorted(table[:, CELL_HI].astype(np.int64), cells, side="right").astype(np.intp)
    return chunks[np.r_[True, chunks[1:] != chunks[:-1]]] if chunks.shape[0] else chunks
