"""numpy versions of the row-copying kernels, for the calls made before numba's kernels are loaded.

Same arguments and results as the kernels of the same names in ``deltacells.tiles._gather`` (tested against
them), in whole-array numpy operations: no loop per row or per nonzero (see ``deltacells._kernel_loading``).
"""

from __future__ import annotations

import numpy as np

from deltacells.codec import row_column_order

__all__ = [
    "drop_dropped_columns",
    "gather_rows",
    "gather_rows_mapped",
    "gather_rows_split",
    "gather_rows_split_sorted",
]


def gather_rows(
    src_indptr: np.ndarray,
    src_indices: np.ndarray,
    src_data: np.ndarray,
    rows: np.ndarray,
    out_indptr: np.ndarray,
    out_slots: np.ndarray,
    out_indices: np.ndarray,
    out_data: np.ndarray,
) -> None:
    """Copy row ``rows[i]`` of the source into output row ``out_slots[i]`` (values cast to ``out_data``'s dtype)."""
    _copy_rows(src_indptr, src_indices, src_data, rows, out_indptr[out_slots], out_indices, out_data)


def gather_rows_mapped(
    src_indptr: np.ndarray,
    src_indices: np.ndarray,
    src_data: np.ndarray,
    rows: np.ndarray,
    out_indptr: np.ndarray,
    out_slots: np.ndarray,
    out_indices: np.ndarray,
    out_data: np.ndarray,
    columns: np.ndarray,
    sort: bool,
) -> None:
    """:func:`gather_rows`, writing ``columns[j]`` for stored column ``j``; with ``sort``, each row in order."""
    dests = out_indptr[out_slots]
    sort_columns = columns.shape[0] if sort else None
    _copy_rows(src_indptr, src_indices, src_data, rows, dests, out_indices, out_data, columns, sort_columns)


def gather_rows_split(
    src_indptr: np.ndarray,
    src_indices: np.ndarray,
    src_data: np.ndarray,
    rows: np.ndarray,
    pieces: np.ndarray,
    piece_rows: np.ndarray,
    indptr_starts: np.ndarray,
    indptrs: np.ndarray,
    nnz_starts: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
) -> None:
    """Copy row ``rows[i]`` into row ``piece_rows[i]`` of output ``pieces[i]`` (outputs laid end to end)."""
    dests = nnz_starts[pieces] + indptrs[indptr_starts[pieces] + piece_rows]
    _copy_rows(src_indptr, src_indices, src_data, rows, dests, indices, data)


def gather_rows_split_sorted(
    src_indptr: np.ndarray,
    src_indices: np.ndarray,
    src_data: np.ndarray,
    rows: np.ndarray,
    pieces: np.ndarray,
    piece_rows: np.ndarray,
    indptr_starts: np.ndarray,
    indptrs: np.ndarray,
    nnz_starts: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    n_columns: int,
) -> None:
    """:func:`gather_rows_split`, each row's columns sorted on the way (with their values)."""
    dests = nnz_starts[pieces] + indptrs[indptr_starts[pieces] + piece_rows]
    _copy_rows(src_indptr, src_indices, src_data, rows, dests, indices, data, sort_columns=n_columns)


def drop_dropped_columns(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, limit: int) -> int:
    """Remove every nonzero whose column is ``limit`` or more, in place; rewrite ``indptr``; the new nnz."""
    lo, hi = int(indptr[0]), int(indptr[-1])
    keep = indices[lo:hi] < limit
    before = np.concatenate(([0], np.cumsum(keep)))  # nonzeros kept before each position
    kept = np.flatnonzero(keep) + lo
    n = kept.shape[0]
    indices[lo : lo + n] = indices[kept]
    data[lo : lo + n] = data[kept]
    indptr[:] = lo + before[indptr - lo]
    return n


def _copy_rows(
    src_indptr: np.ndarray,
    src_indices: np.ndarray,
    src_data: np.ndarray,
    rows: np.ndarray,
    dests: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    columns: np.ndarray | None = None,
    sort_columns: int | None = None,
) -> None:
    """Copy row ``rows[i]`` of the source to ``indices[dests[i]:]`` and ``data[dests[i]:]`` (what every kernel does).

    ``columns`` maps the stored columns; ``sort_columns`` (columns of the output), if given, sorts each row.
    """
    source, target, owner = _positions(src_indptr, rows, dests)
    row_indices = src_indices[source] if columns is None else columns[src_indices[source]]
    row_data = src_data[source]
    if sort_columns is not None:
        row_indices, row_data = _sorted_by_row(owner, row_indices, row_data, sort_columns)
    data[target] = row_data
    indices[target] = row_indices


def _positions(
    src_indptr: np.ndarray, rows: np.ndarray, dests: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every nonzero of the rows ``rows``: its source position, its target (row ``i`` from ``dests[i]``), its row."""
    starts = src_indptr[rows]
    lengths = src_indptr[rows + 1] - starts
    owner = np.repeat(np.arange(rows.shape[0], dtype=np.int64), lengths)
    within = np.arange(owner.shape[0], dtype=np.int64) - (np.cumsum(lengths) - lengths)[owner]
    return starts[owner] + within, dests[owner] + within, owner


def _sorted_by_row(
    owner: np.ndarray, indices: np.ndarray, data: np.ndarray, n_columns: int
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's nonzeros (rows consecutive, ``owner`` naming each one's) in increasing column order."""
    order = row_column_order(owner, indices, n_columns)
    return indices[order], data[order]
