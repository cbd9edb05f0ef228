"""Reading a range of consecutive cells: the tiles it wants whole decode straight into the output.

The fast path of :meth:`~deltacells.Dataset.read_rows` (a slice of step 1, a full read) and a collection's full
read (:meth:`~deltacells.Dataset.read_range_into`): a :class:`RangePlan` says which tiles a range reads, which
decode into their slices of the output (whole, not cached) and which are copied from their decoded arrays (the
end tiles wanted in part, tiles the cache holds whole); :class:`RangeReads` carries it out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from deltacells._kernel_loading import prepare_kernels
from deltacells.core._follow import STALE_ERRORS, follow_append
from deltacells.core._row_output import RowOutput
from deltacells.errors import InvalidValueError
from deltacells.format import Manifest
from deltacells.tiles import TileReader

if TYPE_CHECKING:
    from scipy import sparse

    from deltacells.codec import DecodedTile

__all__ = ["RangePlan", "RangeReads", "as_range"]


def as_range(rows: np.ndarray | slice) -> tuple[int, int] | None:
    """``(start, stop)`` if ``rows`` are consecutive increasing cells (a slice of step 1, or such an array).

    Parameters
    ----------
    rows
        Rows as :func:`~deltacells.core.normalize_rows` gives them (a slice has a step of 1 there, or is an array).

    Returns
    -------
    tuple of int or None
        The range, or None (no rows, or not consecutive).
    """
    if isinstance(rows, slice):
        return (rows.start, rows.stop) if rows.stop > rows.start else None
    n = rows.shape[0]
    if n == 0 or rows[-1] - rows[0] != n - 1:
        return None
    if n > 1 and not bool(np.all(rows[1:] - rows[:-1] == 1)):
        return None
    return int(rows[0]), int(rows[-1]) + 1


class RangePlan(NamedTuple):
    """Which tiles a range of cells reads, how, and where each goes in the output.

    Attributes
    ----------
    tiles
        ``int64[k]``: the tiles holding the range, in order.
    lo, hi
        ``int64[k]``: the local rows ``[lo, hi)`` of each tile in the range.
    direct
        ``bool[k]``: whether the tile decodes straight into the output (wanted whole, not cached whole).
    copied
        The other tiles, decoded (whole or the rows wanted), by position in ``tiles``: copied into the output.
    nnz_starts
        ``int64[k + 1]``: the first nonzero of each tile in the output, then the range's nonzeros.
    """

    tiles: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    direct: np.ndarray
    copied: dict[int, DecodedTile]
    nnz_starts: np.ndarray

    @property
    def nnz(self) -> int:
        """Nonzeros of the range (before any gene left out is removed)."""
        return int(self.nnz_starts[-1])


class RangeReads:
    """Ranges of a dataset's cells read into one output, tiles wanted whole decoded straight into it.

    Parameters
    ----------
    tiles
        The dataset's tiles.
    manifest
        The dataset's manifest.
    limits, starts
        ``int64[n_tiles]``: the end (excluded) and the first cell of each tile (the manifest's, computed once).
    output
        The output of the dataset's reads (its columns).
    """

    def __init__(
        self, tiles: TileReader, manifest: Manifest, limits: np.ndarray, starts: np.ndarray, output: RowOutput
    ) -> None:
        self._tiles = tiles
        self._manifest = manifest
        self._limits = limits
        self._starts = starts
        self._output = output

    def read(self, start: int, stop: int, dtype: np.dtype) -> sparse.csr_matrix | None:
        """Cells ``start`` to ``stop`` (excluded): tiles wanted whole and not cached decode into the output.

        The tiles at either end, if only part of them is wanted, and tiles the cache holds whole, are copied
        from their decoded arrays; the others are decoded into their slices of the output, in its dtype,
        with no intermediate arrays (:meth:`TileReader.read_into`), and are not cached.

        Returns
        -------
        scipy.sparse.csr_matrix or None
            The cells, or None when the output needs 64-bit indices (the general path then reads it).
        """
        plan = self.plan(start, stop)
        nnz = plan.nnz
        if nnz >= 2**31:  # 64-bit indices (scipy's rule): the general path
            return None
        out_indptr = np.empty(stop - start + 1, dtype=np.int64)
        out_indices, out_data = self._output.empty(nnz, dtype)
        # While the decoding threads map the output's pages, the kernels load (in a fresh process).
        prepare_kernels(nnz)
        self.fill(plan, dtype, out_indptr, out_indices, out_data)
        return self._output.csr(out_data, out_indices, out_indptr, sorted_already=True)

    def capacity(self, start: int, stop: int) -> int:
        """The most nonzeros cells ``start`` to ``stop`` (excluded) hold, those of their tiles (the manifest's)."""
        first, last = (int(t) for t in np.searchsorted(self._limits, [start, stop - 1], side="right"))
        return int(self._manifest.tile_nnz[first : last + 1].sum())

    def read_into(
        self,
        start: int,
        stop: int,
        dtype: np.dtype,
        out_indptr: np.ndarray,
        out_indices: np.ndarray,
        out_data: np.ndarray,
    ) -> int:
        """Cells ``start`` to ``stop`` (excluded) written into given arrays; the nonzeros written.

        See :meth:`~deltacells.Dataset.read_range_into`. An append that rewrote the last tile while it was read
        is followed, and the range planned and read again.

        Raises
        ------
        InvalidValueError
            If the arrays cannot hold the range.
        """
        plan = self.plan(start, stop)
        nnz = plan.nnz
        if out_indices.shape[0] < nnz or out_data.shape[0] < nnz or out_indptr.shape[0] != stop - start + 1:
            msg = f"the output holds {out_indices.shape[0]} nonzeros and {out_indptr.shape[0]} row pointers, not enough"
            raise InvalidValueError(msg)
        out_indices, out_data = out_indices[:nnz], out_data[:nnz]
        try:
            self.fill(plan, dtype, out_indptr, out_indices, out_data)
        except STALE_ERRORS:  # an append rewrote the last tile: planned again (the plan holds a read under way)
            held = self._tiles.holds_in_memory(self._manifest.n_tiles - 1)
            if held or not follow_append(self._tiles, self._manifest):
                raise
            self.fill(self.plan(start, stop), dtype, out_indptr, out_indices, out_data)
        return self._output.finish(out_data, out_indices, out_indptr, sorted_already=True)

    def plan(self, start: int, stop: int) -> RangePlan:
        """Which tiles cells ``start`` to ``stop`` (excluded) read, how, and where each goes.

        The tiles to copy are decoded here (started: their decoding goes on as :meth:`fill` takes them).
        """
        manifest, reader = self._manifest, self._tiles
        first, last = (int(t) for t in np.searchsorted(self._limits, [start, stop - 1], side="right"))
        tiles = np.arange(first, last + 1)
        lo = np.maximum(start, self._starts[tiles]) - self._starts[tiles]
        hi = np.minimum(stop, self._limits[tiles]) - self._starts[tiles]
        whole = (lo == 0) & (hi == manifest.tile_cells[tiles])
        direct = np.array([w and not reader.holds_whole(int(t)) for t, w in zip(tiles, whole, strict=True)])
        # The end tiles wanted in part (and tiles cached whole) come through iter_tiles: on remote storage a few
        # cells of a tile are read in byte ranges there, as for any other subset, not as the whole tile.
        pending = np.flatnonzero(~direct)
        rows = [None if whole[k] else np.arange(lo[k], hi[k]) for k in pending]
        decoded = (tile for _, tile in reader.iter_tiles(tiles[pending], rows=rows)) if pending.size else ()
        copied = dict(zip(pending.tolist(), decoded, strict=True))
        counts = np.array(
            [
                int(manifest.tile_nnz[t]) if direct[k] else int(copied[k].indptr[hi[k]] - copied[k].indptr[lo[k]])
                for k, t in enumerate(tiles)
            ],
            dtype=np.int64,
        )
        nnz_starts = np.zeros(tiles.shape[0] + 1, dtype=np.int64)
        np.cumsum(counts, out=nnz_starts[1:])
        return RangePlan(tiles, lo, hi, direct, copied, nnz_starts)

    def fill(
        self,
        plan: RangePlan,
        dtype: np.dtype,
        out_indptr: np.ndarray,
        out_indices: np.ndarray,
        out_data: np.ndarray,
    ) -> None:
        """Carry out ``plan``: its tiles' rows written into the output (``int64`` row pointers from 0).

        The copied tiles' mapped rows are sorted here; the direct tiles' are sorted as they decode.
        """
        output = self._output
        tiles, lo, hi, direct, copied, nnz_starts = plan
        row_starts = np.concatenate(([0], np.cumsum(hi - lo)))
        out_indptr[row_starts] = nnz_starts  # each tile's first row (what the copies below start from), and the end
        for k, tile in copied.items():
            output.warn_if_inexact(tile.inexact_in_float32, dtype)
            r, m = int(row_starts[k]), int(hi[k] - lo[k])
            ptr = tile.indptr[lo[k] : hi[k] + 1]
            np.add(ptr[1:], nnz_starts[k] - ptr[0], out=out_indptr[r + 1 : r + 1 + m])
            slots = np.arange(r, r + m, dtype=np.int64)
            rows = np.arange(lo[k], hi[k], dtype=np.int64)
            output.copy_rows(tile.indptr, tile.indices, tile.data, rows, out_indptr, slots, out_indices, out_data)
        if copied and output.columns is not None:  # direct tiles are sorted as they decode
            spans = [(int(row_starts[k]), int(row_starts[k + 1])) for k in copied]
            output.sort_rows(out_indptr, out_indices, out_data, spans)
        if direct.any():
            starts = (row_starts[:-1][direct], nnz_starts[:-1][direct])
            outputs = (out_indptr, out_indices, out_data)
            large = self._tiles.read_into(tiles[direct], *starts, *outputs, columns=output.columns)
            output.warn_if_inexact(large, dtype)
