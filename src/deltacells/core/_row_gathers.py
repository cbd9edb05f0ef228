"""Gathering any rows of a dataset (any order, repeats) from the decoded tiles holding them, through the tile cache.

The general path of :meth:`~deltacells.Dataset.read_rows` (what is not a range of consecutive cells): the rows are
grouped by tile, the tiles needed decoded (whole, or only the chunks holding the rows), and each tile's rows copied
into the output, in one of three ways (:class:`RowGathers`): few tiles, all held at once; rows in increasing order,
streamed into an output of the tiles' nonzeros; any order, each tile's rows kept compact (:func:`select_rows`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from deltacells.core._row_output import RowOutput
from deltacells.format import Manifest
from deltacells.tiles import TileReader, gather_rows

if TYPE_CHECKING:
    from scipy import sparse

    from deltacells.codec import DecodedTile

__all__ = ["RowGathers", "select_rows"]


def select_rows(tile: DecodedTile, rows: np.ndarray, dtype: np.dtype) -> tuple[np.ndarray, ...]:
    """Rows ``rows`` of ``tile`` as compact CSR arrays.

    Parameters
    ----------
    tile
        A decoded tile.
    rows
        ``int64``: local rows of the tile.
    dtype
        Dtype of the values.

    Returns
    -------
    tuple of numpy.ndarray
        ``(positions, indptr, indices, data)``: the rows' positions in the arrays (``0 .. len(rows) - 1``), then
        the arrays, which hold only those rows.
    """
    lengths = tile.indptr[rows + 1] - tile.indptr[rows]
    indptr = indptr_from_lengths(lengths)
    indices = np.empty(int(indptr[-1]), dtype=np.int32)
    data = np.empty(int(indptr[-1]), dtype=dtype)
    positions = np.arange(rows.shape[0], dtype=np.int64)
    gather_rows(tile.indptr, tile.indices, tile.data, rows, indptr, positions, indices, data)
    return positions, indptr, indices, data


def indptr_from_lengths(lengths: np.ndarray) -> np.ndarray:
    """``int64[len(lengths) + 1]``: the row pointers of rows of ``lengths`` nonzeros."""
    indptr = np.zeros(lengths.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    return indptr


class RowGathers:
    """Rows of a dataset in any order, gathered from its decoded tiles into one output.

    Parameters
    ----------
    tiles
        The dataset's tiles (and their cache).
    manifest
        The dataset's manifest.
    output
        The output of the dataset's reads (its columns).
    """

    def __init__(self, tiles: TileReader, manifest: Manifest, output: RowOutput) -> None:
        self._tiles = tiles
        self._manifest = manifest
        self._output = output

    def read(self, rows: np.ndarray, tiles: np.ndarray, local: np.ndarray, dtype: np.dtype) -> sparse.csr_matrix:
        """Cells ``rows`` as a CSR matrix, in their order.

        Parameters
        ----------
        rows
            ``int64``: the cells, in any order, with repeats.
        tiles, local
            The tile of each cell and its row there (:meth:`~deltacells.Dataset.tile_of`).
        dtype
            Dtype of the values (one of the decoders').

        Returns
        -------
        scipy.sparse.csr_matrix
            ``len(rows) x n_columns``.
        """
        n_out = rows.shape[0]
        order = np.argsort(tiles, kind="stable")
        sorted_tiles = tiles[order]
        needed, first = np.unique(sorted_tiles, return_index=True)
        bounds = np.append(first, n_out)

        if needed.shape[0] <= self._tiles.decode_ahead:
            return self._gather_direct(needed, order, bounds, local, n_out, dtype)
        increasing = n_out < 2 or bool(np.all(rows[1:] > rows[:-1]))
        if increasing:
            # Rows in tile order, no repeats: the output holds at most what the needed tiles hold.
            # When the request covers most of them, allocate that and fill tile by tile (then trim).
            tile_nnz, tile_cells = self._manifest.tile_nnz[needed], self._manifest.tile_cells[needed]
            capacity = int(tile_nnz.sum())
            expected = float((tile_nnz * np.diff(bounds) / tile_cells).sum())
            if capacity <= 2 * expected + 1024:
                return self._gather_ascending(needed, order, bounds, local, n_out, dtype, capacity)
        return self._gather_compact(needed, order, bounds, local, n_out, dtype)

    def _gather_direct(
        self, needed: np.ndarray, order: np.ndarray, bounds: np.ndarray, local: np.ndarray, n_out: int, dtype: np.dtype
    ) -> sparse.csr_matrix:
        """Few tiles: decode them all, then copy the rows straight into the output."""
        output = self._output
        tiles = [tile for _, tile in self._tiles_for(needed, order, bounds, local)]
        for tile in tiles:
            output.warn_if_inexact(tile.inexact_in_float32, dtype)
        lengths = np.zeros(n_out, dtype=np.int64)
        for k, tile in enumerate(tiles):
            slots = order[bounds[k] : bounds[k + 1]]
            loc = local[slots]
            lengths[slots] = tile.indptr[loc + 1] - tile.indptr[loc]
        out_indptr = indptr_from_lengths(lengths)
        out_indices, out_data = output.empty(int(out_indptr[-1]), dtype)
        for k, tile in enumerate(tiles):
            slots = order[bounds[k] : bounds[k + 1]]
            output.copy_rows(
                tile.indptr, tile.indices, tile.data, local[slots], out_indptr, slots, out_indices, out_data
            )
        return output.csr(out_data, out_indices, out_indptr)

    def _gather_ascending(
        self,
        needed: np.ndarray,
        order: np.ndarray,
        bounds: np.ndarray,
        local: np.ndarray,
        n_out: int,
        dtype: np.dtype,
        capacity: int,
    ) -> sparse.csr_matrix:
        """Rows in ascending order: stream the tiles, appending each one's rows to the output."""
        output = self._output
        out_indptr = np.zeros(n_out + 1, dtype=np.int64)
        out_indices, out_data = output.empty(capacity, dtype)
        for k, (_, tile) in enumerate(self._tiles_for(needed, order, bounds, local)):
            output.warn_if_inexact(tile.inexact_in_float32, dtype)
            slots = order[bounds[k] : bounds[k + 1]]
            loc = local[slots]
            first = int(slots[0])
            np.cumsum(tile.indptr[loc + 1] - tile.indptr[loc], out=out_indptr[first + 1 : first + 1 + slots.shape[0]])
            out_indptr[first + 1 : first + 1 + slots.shape[0]] += out_indptr[first]
            output.copy_rows(tile.indptr, tile.indices, tile.data, loc, out_indptr, slots, out_indices, out_data)
        nnz = int(out_indptr[-1])
        # Views, not resize(): a large output is on a mapping of its own (deltacells._memory), which numpy cannot
        # resize; the capacity is at most about twice the rows' nonzeros, so scipy keeps the views as they are.
        return output.csr(out_data[:nnz], out_indices[:nnz], out_indptr)

    def _gather_compact(
        self, needed: np.ndarray, order: np.ndarray, bounds: np.ndarray, local: np.ndarray, n_out: int, dtype: np.dtype
    ) -> sparse.csr_matrix:
        """Many tiles, any order: keep only each tile's selected rows, then assemble."""
        output = self._output
        lengths = np.zeros(n_out, dtype=np.int64)
        parts = []
        for k, (_, tile) in enumerate(self._tiles_for(needed, order, bounds, local)):
            output.warn_if_inexact(tile.inexact_in_float32, dtype)
            slots = order[bounds[k] : bounds[k + 1]]
            loc = local[slots]
            lengths[slots] = tile.indptr[loc + 1] - tile.indptr[loc]
            parts.append((slots, *select_rows(tile, loc, dtype)))
        out_indptr = indptr_from_lengths(lengths)
        out_indices, out_data = output.empty(int(out_indptr[-1]), dtype)
        for slots, loc, src_indptr, src_indices, src_data in parts:
            output.copy_rows(src_indptr, src_indices, src_data, loc, out_indptr, slots, out_indices, out_data)
        return output.csr(out_data, out_indices, out_indptr)

    def _tiles_for(
        self, needed: np.ndarray, order: np.ndarray, bounds: np.ndarray, local: np.ndarray
    ) -> Iterator[tuple[int, DecodedTile]]:
        """The decoded tiles ``needed``, in order.

        A tile needed for fewer rows than it has cells may come partial: only the chunks holding those
        cells decoded (and, on remote storage, maybe only their bytes read). A tile needed for at least as
        many rows as it has cells (a slice over it, a full read) is decoded whole.
        """
        reader = self._tiles
        counts = np.diff(bounds)
        whole = counts >= self._manifest.tile_cells[needed]
        wanted = [None if whole[k] else local[order[bounds[k] : bounds[k + 1]]] for k in range(needed.shape[0])]
        if needed.shape[0] == 1:
            t, cells = int(needed[0]), wanted[0]
            if cells is None or not reader.reads_ranged(t, len(cells), cells=cells):
                yield t, reader.get(t, cells=cells)
                return
        yield from reader.iter_tiles(needed, rows=None if whole.all() else wanted)
