"""numpy versions of the decoder's kernels, for the calls made before numba's kernels are loaded.

Same arguments and same results as the kernels of ``deltacells.codec._kernels`` of the same names (tested
against them on random and malformed input), in whole-array numpy operations: no loop per cell or per
nonzero, several times slower than the compiled kernels per nonzero, but nothing to load or compile (see
``deltacells._kernel_loading``). They detect every broken rule the kernels detect; to say which rule and
where, a failing call hands the same input to the compiled kernel, whose report the caller turns into the
error (malformed input is rare; loading numba for it is fine).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from deltacells._kernel_loading import load_compiled_kernels
from deltacells.codec._codes import OK
from deltacells.codec._layout import (
    CELL_HI,
    CELL_LO,
    GAPS_LEN,
    GAPS_OFF,
    GEXC_LEN,
    GEXC_OFF,
    NNZ_HI,
    NNZ_LO,
    VALS_LEN,
    VALS_OFF,
    VEXC_LEN,
    VEXC_OFF,
)

__all__ = ["chunk_table_ok", "decode_chunk", "row_column_order", "sort_rows"]


def chunk_table_ok(
    table: np.ndarray,
    indptr: np.ndarray,
    n_cells: np.uint64,
    nnz: np.uint64,
    total_size: np.uint64,
    min_offset: np.uint64,
) -> bool:
    """Whether a chunk table passes every rule (``deltacells.codec._kernels.chunk_table_ok``)."""
    if table.shape[0] == 0:
        return True
    cell_lo, cell_hi, nnz_lo, nnz_hi = (table[:, k] for k in (CELL_LO, CELL_HI, NNZ_LO, NNZ_HI))
    if cell_lo[0] != 0 or nnz_lo[0] != 0 or cell_hi[-1] != n_cells or nnz_hi[-1] != nnz:
        return False
    if (cell_lo[1:] != cell_hi[:-1]).any() or (nnz_lo[1:] != nnz_hi[:-1]).any():
        return False
    if (cell_hi < cell_lo).any() or (nnz_hi < nnz_lo).any():
        return False
    # Cells are now contiguous from 0 to n_cells: they index the indptr safely.
    pointers = indptr.astype(np.uint64)
    if (pointers[cell_lo] != nnz_lo).any() or (pointers[cell_hi] != nnz_hi).any():
        return False
    if (nnz_hi - nnz_lo >= np.uint64(2**32)).any():
        return False
    for off_col, len_col, required in (
        (GAPS_OFF, GAPS_LEN, True),
        (VALS_OFF, VALS_LEN, True),
        (VEXC_OFF, VEXC_LEN, False),
        (GEXC_OFF, GEXC_LEN, False),
    ):
        offset, length = table[:, off_col], table[:, len_col]
        present = length != 0
        if required and not present.all():
            return False
        outside = (offset > total_size) | (length > total_size - np.minimum(offset, total_size))
        if (present & (outside | (offset < min_offset))).any():
            return False
    return True


def decode_chunk(
    gaps: np.ndarray,
    vals: np.ndarray,
    indptr: np.ndarray,
    cell_lo: int,
    cell_hi: int,
    nnz_lo: int,
    n_genes: int,
    out_indices: np.ndarray,
    out_data: np.ndarray,
    columns: np.ndarray | None = None,
) -> tuple[int, int]:
    """Decode one chunk's byte planes (``deltacells.codec._kernels.decode_chunk``): ``(code, position)``."""
    n = out_indices.shape[0]
    if n == 0:
        return OK, 0
    gap = _merged(gaps, n)
    bounds = indptr[cell_lo : cell_hi + 1].astype(np.int64) - nnz_lo
    lengths = np.diff(bounds)
    filled = lengths > 0
    starts, stops = bounds[:-1][filled], bounds[1:][filled]
    genes = np.cumsum(gap, dtype=np.int64)
    genes -= np.repeat(genes[starts] - gap[starts], lengths[filled])  # each cell's sums start at its first gap
    value = _merged(vals, n)
    zero_gaps = n - np.count_nonzero(gap)
    broken = (
        zero_gaps != np.count_nonzero(gap[starts] == 0)  # a zero gap is allowed as a cell's first only
        or bool((genes[stops - 1] >= n_genes).any())  # a cell's last gene is its largest
        or not value.all()
    )
    if broken:
        return _compiled_decode_chunk(
            gaps, vals, indptr, cell_lo, cell_hi, nnz_lo, n_genes, out_indices, out_data, columns
        )
    if columns is None:
        out_indices[:] = genes
    else:
        np.take(columns, genes, out=out_indices)
    out_data[:] = value
    return OK, 0


def sort_rows(
    indptr: np.ndarray,
    first_row: int,
    end_row: int,
    offset: int,
    indices: np.ndarray,
    data: np.ndarray,
    n_columns: int,
) -> None:
    """Put each row's columns in increasing order, with their values (``deltacells.codec._kernels.sort_rows``)."""
    lo, hi = int(indptr[first_row]) - offset, int(indptr[end_row]) - offset
    if hi - lo < 2:
        return
    lengths = np.diff(indptr[first_row : end_row + 1])
    rows = np.repeat(np.arange(end_row - first_row, dtype=np.int64), lengths)
    order = row_column_order(rows, indices[lo:hi], n_columns)
    indices[lo:hi] = indices[lo:hi][order]
    data[lo:hi] = data[lo:hi][order]


def row_column_order(rows: np.ndarray, columns: np.ndarray, n_columns: int) -> np.ndarray:
    """The order of nonzeros by row, then column: ``rows`` non-decreasing, no column twice in a row.

    The keys all differ, so any sort gives the one order. When row, column and position fit in 64 bits
    (fewer than 2^31 rows times columns), they are packed and sorted as numbers (numpy's vectorised sort:
    9 ns a nonzero on the benchmark machine, against 17 for ``argsort`` and 47 for a stable one).
    """
    n = columns.shape[0]
    if n and int(rows[-1] + 1) * n_columns < 2**31 and n < 2**32:
        packed = (rows * n_columns + columns).astype(np.uint64)
        packed <<= np.uint64(32)
        packed |= np.arange(n, dtype=np.uint64)
        packed.sort()
        order: np.ndarray = (packed & np.uint64(0xFFFFFFFF)).astype(np.int64)
        return order
    return np.argsort(rows * n_columns + columns)


def _merged(planes: np.ndarray, n: int) -> np.ndarray:
    """The ``n`` 16-bit numbers of two byte planes (``n`` low bytes, then ``n`` high bytes), as ``int64``."""
    merged = planes[n : 2 * n].astype(np.int64)
    merged <<= 8
    merged |= planes[:n]
    return merged


def _compiled_decode_chunk(*args: Any) -> tuple[int, int]:
    """The compiled ``decode_chunk``'s report on input the numpy version found broken."""
    load_compiled_kernels()
    from deltacells.codec import _kernels

    code, position = _kernels.decode_chunk(*args)
    return int(code), int(position)
