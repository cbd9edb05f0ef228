"""``gather_rows_split(_sorted)``: rows copied into outputs laid end to end, each row's columns sorted on the way.

Both implementations: numba's kernels (``deltacells.tiles._gather``) and their numpy versions
(``deltacells.tiles._gather_vectorised``), which serve until the kernels are loaded.
"""

from __future__ import annotations

import numpy as np
import pytest

from deltacells.codec._kernels import radix_passes
from deltacells.tiles import _gather, _gather_vectorised

IMPLEMENTATIONS = pytest.mark.parametrize("gather", [_gather, _gather_vectorised], ids=["numba", "numpy"])


def _outputs(lengths: list[int], rows: np.ndarray, pieces: np.ndarray, piece_rows: np.ndarray, dtype: type):
    """Two outputs end to end (``indptr_starts, indptrs, nnz_starts, indices, data``), and each one's source rows."""
    mine = [rows[pieces == p][np.argsort(piece_rows[pieces == p])] for p in (0, 1)]
    indptrs = [np.concatenate(([0], np.cumsum([lengths[r] for r in m]))).astype(np.int64) for m in mine]
    indptr_starts = np.array([0, indptrs[0].shape[0], indptrs[0].shape[0] + indptrs[1].shape[0]], dtype=np.int64)
    nnz_starts = np.array([0, indptrs[0][-1], indptrs[0][-1] + indptrs[1][-1]], dtype=np.int64)
    arrays = (
        indptr_starts,
        np.concatenate(indptrs),
        nnz_starts,
        np.full(nnz_starts[-1], -1, np.int32),
        np.zeros(nnz_starts[-1], dtype),
    )
    return arrays, mine, indptrs


@IMPLEMENTATIONS
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("n_columns", [7, 256, 19_465, 70_000, 20_000_000])  # 1, 1, 2, 3 and 4 radix passes
def test_rows_land_in_their_outputs_sorted_with_their_values(gather, n_columns: int, dtype: type) -> None:
    rng = np.random.default_rng(n_columns)
    lengths = [min(n, n_columns) for n in (0, 1, 5, 300, 2, 40, 7, 120)]
    indices = np.concatenate([rng.choice(n_columns, n, replace=False) for n in lengths]).astype(np.int32)
    indptr = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    indices[indptr[3] : indptr[4]].sort()  # one row already in order: copied as it is
    data = rng.integers(1, 10_000, size=indices.shape[0]).astype(dtype)
    rows = np.array([6, 3, 0, 1, 7, 2, 5], dtype=np.int64)  # row 4 is not wanted
    pieces = np.array([1, 0, 1, 0, 0, 1, 1], dtype=np.int64)
    piece_rows = np.array([0, 0, 1, 1, 2, 2, 3], dtype=np.int64)
    arrays, mine, indptrs = _outputs(lengths, rows, pieces, piece_rows, dtype)
    gather.gather_rows_split_sorted(indptr, indices, data, rows, pieces, piece_rows, *arrays, n_columns)
    assert 1 <= radix_passes(n_columns) <= 4
    _, _, nnz_starts, out_indices, out_data = arrays
    for p in (0, 1):
        for k, r in enumerate(mine[p]):
            source = slice(indptr[r], indptr[r + 1])
            order = np.argsort(indices[source])
            got = slice(nnz_starts[p] + indptrs[p][k], nnz_starts[p] + indptrs[p][k + 1])
            np.testing.assert_array_equal(out_indices[got], indices[source][order])
            np.testing.assert_array_equal(out_data[got], data[source][order])


@IMPLEMENTATIONS
def test_rows_are_copied_as_they_are_without_sorting(gather) -> None:
    rng = np.random.default_rng(3)
    lengths = [4, 0, 9, 1]
    indices = rng.integers(0, 50, size=sum(lengths)).astype(np.int32)
    indptr = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    data = rng.random(indices.shape[0])
    rows = np.array([2, 0, 3, 1, 2], dtype=np.int64)  # a repeat
    pieces = np.array([0, 1, 0, 1, 1], dtype=np.int64)
    piece_rows = np.array([1, 0, 0, 2, 1], dtype=np.int64)
    arrays, mine, indptrs = _outputs(lengths, rows, pieces, piece_rows, np.float64)
    gather.gather_rows_split(indptr, indices, data, rows, pieces, piece_rows, *arrays)
    _, _, nnz_starts, out_indices, out_data = arrays
    for p in (0, 1):
        for k, r in enumerate(mine[p]):
            got = slice(nnz_starts[p] + indptrs[p][k], nnz_starts[p] + indptrs[p][k + 1])
            np.testing.assert_array_equal(out_indices[got], indices[indptr[r] : indptr[r + 1]])
            np.testing.assert_array_equal(out_data[got], data[indptr[r] : indptr[r + 1]])
